package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
)

// bundleProbe runs from its bundle inside the sandbox: it reads its input,
// tries to change the bundle and writes to its HOME.
const bundleProbe = `#!/bin/sh
echo "input $(cat data/input.txt)"
echo "pwd $PWD"
if echo x >> data/input.txt 2>/dev/null; then echo "append allowed"; else echo "append refused"; fi
if touch new 2>/dev/null; then echo "create allowed"; else echo "create refused"; fi
if rm data/input.txt 2>/dev/null; then echo "delete allowed"; else echo "delete refused"; fi
if touch "$HOME/h" 2>/dev/null; then echo "home writable"; else echo "home read-only"; fi
echo "probe done"
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.1; done
`

// TestBundleIsTheSandboxedWorkdir submits a job the way 'reclaimnet run
// --workdir DIR -- ./probe.sh' does, from a directory the sandbox does not
// show the job: the job runs as a guest in the bundle's layout, reads its
// input there, cannot change it, and has a writable HOME.
func TestBundleIsTheSandboxedWorkdir(t *testing.T) {
	_, n := startSolo(t, nil)
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"probe.sh": bundleProbe, "data/input.txt": "from-the-bundle\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, n, localapi.JobRequest{Name: "bundled", Command: []string{"./probe.sh"}, GPUs: 1, Workdir: src})
	log := waitLog(t, n, "bundled", "probe done", 60*time.Second)
	layout := filepath.Join(n.agent.DataDir(), jobsDirName, "bundled", "bundle")
	for _, want := range []string{"input from-the-bundle", "pwd " + layout, "append refused", "create refused", "delete refused", "home writable"} {
		if !strings.Contains(log, want+"\n") {
			t.Errorf("job log lacks %q:\n%s", want, log)
		}
	}
	if b, err := os.ReadFile(filepath.Join(src, "data", "input.txt")); err != nil || string(b) != "from-the-bundle\n" {
		t.Errorf("the submitted directory changed: %q, %v", b, err)
	}
}

package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reclaimnet/reclaimnet/internal/testbin"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// TestBundleOnlyWhatTheCallerMayRead is the probe of a local user who
// tries to make the root agent bundle files she may not read: a file of
// root's (0600) in her own directory, and a directory of root's (0700) with
// a world-readable file inside. 'reclaimnet run' as her exits 2 naming the
// entry, and no job is submitted; the same directory without those entries
// is taken. The CLI does not walk the directory, so the refusal is the
// agent's.
func TestBundleOnlyWhatTheCallerMayRead(t *testing.T) {
	needRoot(t)
	bin := testbin.Binary(t, "RECLAIMNET_BINARY")
	_, n := startSolo(t, nil)
	openToUsers(t, n.agent.DataDir(), bin)
	write := func(p, body string, mode os.FileMode, uid int) {
		t.Helper()
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	src := userCwd(t)
	if err := os.Chown(src, aliceUID, aliceUID); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(src, "job.sh"), "#!/bin/sh\nsleep 600\n", 0o755, aliceUID)

	secret := filepath.Join(src, "shadow-copy")
	write(secret, "root's secret\n", 0o600, 0)
	code, out := asUser(t, bin, aliceUID, n.agent.DataDir(), "run", "--name", "probe-file", "--workdir", src, "--", "./job.sh")
	if code != 2 || !strings.Contains(out, "shadow-copy") || !strings.Contains(out, "not readable by the submitting user") {
		t.Errorf("alice bundles root's 0600 file: exit %d, want 2 naming it: %s", code, out)
	}
	if err := os.Remove(secret); err != nil {
		t.Fatal(err)
	}

	private := filepath.Join(src, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(private, "keys.txt"), "in root's directory\n", 0o644, 0)
	code, out = asUser(t, bin, aliceUID, n.agent.DataDir(), "run", "--name", "probe-dir", "--workdir", src, "--", "./job.sh")
	if code != 2 || !strings.Contains(out, "private") || !strings.Contains(out, "not readable by the submitting user") {
		t.Errorf("alice bundles root's 0700 directory: exit %d, want 2 naming it: %s", code, out)
	}
	if err := os.RemoveAll(private); err != nil {
		t.Fatal(err)
	}

	for _, j := range call(t, n, localapi.Request{Op: localapi.OpJobs}).Jobs {
		if strings.HasPrefix(j.ID, "probe-") {
			t.Errorf("a refused bundle submitted job %s", j.ID)
		}
	}
	if code, out := asUser(t, bin, aliceUID, n.agent.DataDir(), "run", "--name", "mine", "--workdir", src, "--", "./job.sh"); code != 0 {
		t.Fatalf("alice bundles only her own files: exit %d: %s", code, out)
	}
	if _, ok := findJob(call(t, n, localapi.Request{Op: localapi.OpJobs}).Jobs, "mine"); !ok {
		t.Error("alice's own bundle: job mine not submitted")
	}
}

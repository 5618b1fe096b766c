package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonHelperWritesOneCheckpointAtATime runs a job that saves two
// checkpoints back to back with examples/pytorch/reclaimnet_ckpt.py, under
// a supervisor that polls slowly (300 ms): the helper waits until the
// first was moved away, so both arrive whole and in order. Without the
// wait, the second's file lands in the first's directory and its marker
// alone in the fresh one (refused as empty), or the two merge into one.
func TestPythonHelperWritesOneCheckpointAtATime(t *testing.T) {
	if _, err := exec.LookPath(debianPython); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is missing: %v", debianPython, err)
		}
		t.Skipf("needs %s: %v", debianPython, err)
	}
	helperDir, err := filepath.Abs(filepath.Join("..", "..", "examples", "pytorch"))
	if err != nil {
		t.Fatal(err)
	}
	script := `import os, sys, time
sys.path.insert(0, sys.argv[1])
sys.dont_write_bytecode = True
from reclaimnet_ckpt import Checkpointer
ck = Checkpointer()
ck.ready()
def state(v):
    def write(d):
        with open(os.path.join(d, "state"), "w") as f:
            f.write(v)
    return write
print("saved", ck.save(state("first")), ck.save(state("second")), flush=True)
while True:
    time.sleep(0.05)
`
	cfg := testConfig(t)
	cfg.PollInterval = 300 * time.Millisecond
	s := newSupervisor(t, cfg)
	j := startJob(t, s, "", func(sp *Spec) { sp.Command = []string{debianPython, "-c", script, helperDir} })
	var got []string
	for len(got) < 2 {
		e := waitEvent(t, j, EventCheckpointReady, 20*time.Second)
		got = append(got, strings.TrimSpace(readFile(t, filepath.Join(e.Checkpoint.Dir, "state"))))
	}
	if got[0] != "first" || got[1] != "second" {
		t.Errorf("checkpoints hold %q, want [first second]", got)
	}
	waitFor(t, 10*time.Second, "the job's report", func() bool {
		b, _ := os.ReadFile(j.LogPath())
		return strings.Contains(string(b), "saved True True")
	})
}

package campus

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
)

// TestPrivateHomeMountNamespace: the wrapper each namespace-mode agent
// starts under (ownMounts) gives the process a mount namespace of its
// own with private propagation, where its node's home directory is at
// the shared path and the other node's directory is empty: two such
// processes each see their own file there and not the other's, the host
// sees the shared path empty and both directories whole, and the bind
// mount is not shared back.
func TestPrivateHomeMountNamespace(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	at := filepath.Join(root, "home")
	if err := os.Mkdir(at, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(node string) *exec.Cmd {
		t.Helper()
		dir := filepath.Join(root, node)
		other := filepath.Join(root, map[string]string{"lab-a": "lab-b", "lab-b": "lab-a"}[node])
		argv := ownMounts(dir, at, []string{other}, []string{"sleep", "60"})
		cmd := exec.Command(argv[0], argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		return cmd
	}
	seen := func(cmd *exec.Cmd) string {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "root", at, "mine.txt"))
		return string(b)
	}
	for _, node := range []string{"lab-a", "lab-b"} {
		if err := os.Mkdir(filepath.Join(root, node), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, node, "mine.txt"), []byte(node), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, b := start("lab-a"), start("lab-b")
	wait.For(t, 10*time.Second, "both processes in their namespaces", func() bool { return seen(a) == "lab-a" && seen(b) == "lab-b" })
	for _, c := range []struct {
		cmd   *exec.Cmd
		other string
	}{{a, "lab-b"}, {b, "lab-a"}} {
		entries, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(c.cmd.Process.Pid), "root", root, c.other))
		if err != nil || len(entries) != 0 {
			t.Errorf("the other node's directory %s shows %d entries (%v), want it empty", c.other, len(entries), err)
		}
		if _, err := os.Stat(filepath.Join(root, c.other, "mine.txt")); err != nil {
			t.Errorf("the host lost %s's file: %v", c.other, err)
		}
	}
	if entries, err := os.ReadDir(at); err != nil || len(entries) != 0 {
		t.Errorf("the host sees %d entries at %s (%v), want none", len(entries), at, err)
	}
	self, _ := os.Readlink("/proc/self/ns/mnt")
	nsA, _ := os.Readlink("/proc/" + strconv.Itoa(a.Process.Pid) + "/ns/mnt")
	nsB, _ := os.Readlink("/proc/" + strconv.Itoa(b.Process.Pid) + "/ns/mnt")
	if nsA == self || nsB == self || nsA == nsB || nsA == "" {
		t.Errorf("mount namespaces: host %s, lab-a %s, lab-b %s; want three different ones", self, nsA, nsB)
	}
	// The home mount's optional fields: "shared:N" would propagate.
	info, err := os.ReadFile("/proc/" + strconv.Itoa(a.Process.Pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(info), "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && f[4] == at {
			found = true
			if strings.Contains(line, "shared:") {
				t.Errorf("home mount is shared with the host: %s", line)
			}
		}
	}
	if !found {
		t.Errorf("no mount at %s in lab-a's mountinfo", at)
	}
}

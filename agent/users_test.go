package agent

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/reclaimnet/reclaimnet/internal/testbin"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
)

// Two local users without passwd entries (the kernel's uid is what
// counts), outside the guest uid range.
const (
	aliceUID = 60401
	bobUID   = 60402
)

// asUser runs the reclaimnet binary as uid against the agent of dataDir
// and returns its exit code and output.
func asUser(t *testing.T, bin string, uid int, dataDir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"RECLAIMNET_DATA_DIR=" + dataDir, "HOME=/", "USER=root", "PATH=/usr/bin:/bin"}
	cmd.Dir = userCwd(t) // run bundles its working directory
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatalf("run %v as uid %d: %v", args, uid, err)
	}
	return 0, out.String()
}

// openToUsers opens the way to the data dir and the binary to every
// user, as /var/lib and /usr/bin are: the test's temporary directories
// are 0700.
func openToUsers(t *testing.T, dataDir, bin string) {
	t.Helper()
	for d := filepath.Dir(dataDir); d != "/" && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(bin); d != os.TempDir() && strings.HasPrefix(d, os.TempDir()); d = filepath.Dir(d) {
		os.Chmod(d, 0o711)
	}
}

// needRoot skips (fails with CI=true) a test that runs commands as other
// users.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to run commands as other users")
		}
		t.Skip("needs root to run commands as other users")
	}
}

// userCwd is an empty directory every user may enter and read.
func userCwd(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "reclaimnet-user-cwd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestLocalUsers: unprivileged users reach the control socket and are
// told apart by the kernel (SO_PEERCRED), whatever they claim ($USER is
// root here): alice's job records her as its owner and bob may neither
// cancel it, nor create tokens, nor reclaim a machine he does not own;
// the machine's owner named by --owners may; a reclaim naming another
// node is refused.
func TestLocalUsers(t *testing.T) {
	t.Parallel()
	needRoot(t)
	bin := testbin.Binary(t, "RECLAIMNET_BINARY")
	c := newTestCluster(t)
	cfg := c.config("node-00")
	cfg.Owners = []string{"uid:60403"} // carol owns the machine
	n := c.start(cfg)
	dataDir := n.agent.DataDir()
	openToUsers(t, dataDir, bin)
	// The data dir lets users reach the socket and nothing else.
	for _, d := range privateDirs {
		if m := fileMode(t, filepath.Join(dataDir, d)); m != 0o700 {
			t.Errorf("%s: mode %v, want 0700", d, m)
		}
	}
	if code, out := asUser(t, bin, aliceUID, dataDir, "jobs"); code != 0 {
		t.Fatalf("alice: jobs: exit %d: %s", code, out)
	}
	if code, out := asUser(t, bin, aliceUID, dataDir, "run", "--name", "alices", "--", "/bin/sleep", "300"); code != 0 {
		t.Fatalf("alice: run: exit %d: %s", code, out)
	}
	j, ok := n.agent.Coordinator().Store().Job(policy.JobID("alices"))
	if !ok || j.Owner != "uid:60401@node-00" {
		t.Fatalf("alice's job records owner %q, want uid:60401@node-00", j.Owner)
	}
	if code, out := asUser(t, bin, bobUID, dataDir, "jobs"); code != 0 || !strings.Contains(out, "uid:60401@node-00") {
		t.Errorf("bob: jobs: exit %d, want the owner shown: %s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cancel", "alices"}, "belongs to uid:60401@node-00"},
		{[]string{"logs", "alices"}, "belongs to uid:60401@node-00"},
		{[]string{"token", "create"}, "not a cluster admin"},
		{[]string{"node", "remove", "node-01"}, "not a cluster admin"},
		{[]string{"reclaim", "--notice", "60s", "--detach"}, "not an owner of machine node-00"},
	} {
		code, out := asUser(t, bin, bobUID, dataDir, tc.args...)
		if code != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("bob: %v: exit %d, want 1 saying %q: %s", tc.args, code, tc.want, out)
		}
	}
	if j, _ := n.agent.Coordinator().Store().Job("alices"); j.State == policy.JobDone {
		t.Fatal("bob cancelled alice's job")
	}
	// Carol owns the machine: her reclaim is not refused for who she is.
	if code, out := asUser(t, bin, 60403, dataDir, "reclaim", "--cancel"); strings.Contains(out, "not an owner") {
		t.Errorf("carol (an owner): reclaim --cancel: exit %d: %s", code, out)
	}
	// A reclaim that names another node is refused, never applied here.
	resp := call(t, n, localapi.Request{Op: localapi.OpReclaim, Notice: 60e9, Node: "lab-b"})
	if resp.Kind != localapi.KindForbidden || !strings.Contains(resp.Error, "not lab-b") {
		t.Errorf("reclaim naming lab-b on node-00: %+v", resp)
	}
	if _, pending := n.agent.Coordinator().State().Reclaims["node-00"]; pending {
		t.Error("a reclaim naming lab-b reclaimed node-00")
	}
	if code, out := asUser(t, bin, aliceUID, dataDir, "cancel", "alices"); code != 0 {
		t.Errorf("alice: cancel her own job: exit %d: %s", code, out)
	}
	if j, _ := n.agent.Coordinator().Store().Job("alices"); j.State != policy.JobDone {
		t.Errorf("alice's cancel left the job %v", j.State)
	}
}

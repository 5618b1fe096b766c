package enforce

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const childEnv = "RECLAIMNET_ENFORCE_UNPRIVILEGED_CHILD"

// TestStartWithoutPrivilege runs Start as an unprivileged user: the error
// must say that root (or the capabilities) is missing. As root the test
// re-runs itself as nobody; as a normal user it runs directly.
func TestStartWithoutPrivilege(t *testing.T) {
	if os.Getenv(childEnv) == "1" || os.Geteuid() != 0 {
		if Check() == nil {
			t.Skip("this process holds CAP_BPF and CAP_NET_ADMIN")
		}
		e, err := New(Config{Node: "n", Iface: "lo", PinDir: "/sys/fs/bpf/reclaimnet-test/unpriv", Capacity: 1e6,
			Resolve: func(netip.Addr) (string, bool) { return "", false }})
		if err != nil {
			t.Fatal(err)
		}
		err = e.Start(context.Background())
		if err == nil || !strings.Contains(err.Error(), "needs root") {
			t.Fatalf("Start without privilege: err = %v, want one saying it needs root", err)
		}
		fmt.Println("START-ERROR:", err)
		return
	}
	// Root: copy the test binary where nobody can run it and run this test
	// as nobody.
	dir, err := os.MkdirTemp("", "enforce-unpriv")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "enforce.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestStartWithoutPrivilege$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged run failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "START-ERROR:") {
		t.Fatalf("unprivileged run did not reach Start (skipped?):\n%s", out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

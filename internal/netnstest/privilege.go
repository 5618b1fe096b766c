package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// RequirePrivileged skips (or, with CI=true, fails) a test that needs root
// and a kernel with BPF and network namespaces.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if ciRequiresPrivilege() {
		t.Fatal("this test needs root (BPF, TC, network namespaces) and CI=true: it must run here")
	}
	t.Skip("needs root (BPF, TC, network namespaces); run as root to exercise the kernel")
}

// FailOrSkip reports a missing kernel capability: a failure in CI, a skip
// elsewhere.
func FailOrSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	if ciRequiresPrivilege() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (root/kernel capability missing; fails under CI=true)", args...)
}

// ciRequiresPrivilege reports whether this is CI (CI=true), where a
// privileged test that cannot run is a failure.
func ciRequiresPrivilege() bool { return os.Getenv("CI") == "true" }

// RandomSuffix returns 6 random hex digits, to keep the names of
// namespaces, interfaces and pin directories of concurrent tests apart.
func RandomSuffix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// BPFPinDir returns a fresh pin directory under bpffs
// (/sys/fs/bpf/reclaimnet-test/<prefix><random>), removed at test end. It
// does not create the directory.
func BPFPinDir(t testing.TB, prefix string) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf/reclaimnet-test", prefix+RandomSuffix(t))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// RerunAsNobody runs the test named test of this test binary again as the
// user nobody (uid and gid 65534), with env added to its environment, and
// returns its combined output; the test fails if the child does. The
// binary is copied into a fresh world-readable directory (also the
// child's working directory and TMPDIR), since the original usually lives
// where nobody cannot reach it. The caller must be root.
func RerunAsNobody(t testing.TB, test string, env ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "reclaimnet-unpriv")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := copyExecutable(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "TMPDIR="+dir), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as nobody: %v\n%s", test, err, out)
	}
	return strings.TrimSpace(string(out))
}

func copyExecutable(from, to string) error {
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

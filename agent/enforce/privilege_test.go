package enforce

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/reclaimnet/reclaimnet/internal/netnstest"
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
	// Root: run this test again as nobody.
	out := netnstest.RerunAsNobody(t, "TestStartWithoutPrivilege", childEnv+"=1")
	if !strings.Contains(out, "START-ERROR:") {
		t.Fatalf("unprivileged run did not reach Start (skipped?):\n%s", out)
	}
	t.Logf("%s", out)
}

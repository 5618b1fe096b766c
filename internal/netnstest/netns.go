package netnstest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Pair is two network namespaces, A and B, joined by a veth pair,
// created for one test and deleted at its end. A has 10.77.0.1 and
// fd77::1, B 10.77.0.2 and fd77::2. Which side holds the node under test
// is the test's choice (bpf's tests use B, agent/enforce's A).
type Pair struct {
	NameA, NameB string // namespace names, as `ip -n` and `tc -n` take them
	IfA, IfB     string // the veth ends, IfA in A and IfB in B
	NsA, NsB     netns.NsHandle
	A4, B4       netip.Addr
	A6, B6       netip.Addr
}

// Run runs a command (a tool such as ip or tc) and reports its failure
// with FailOrSkip.
func Run(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		FailOrSkip(t, "%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// NewPair creates a Pair with both veth ends and both loopbacks up and
// every IPv6 address usable (no duplicate address detection).
func NewPair(t testing.TB) *Pair {
	t.Helper()
	RequirePrivileged(t)
	s := RandomSuffix(t)
	p := &Pair{
		NameA: "rnA-" + s, NameB: "rnB-" + s, IfA: "rna" + s, IfB: "rnb" + s,
		A4: netip.MustParseAddr("10.77.0.1"), B4: netip.MustParseAddr("10.77.0.2"),
		A6: netip.MustParseAddr("fd77::1"), B6: netip.MustParseAddr("fd77::2"),
	}
	// Named namespaces (as `ip netns add` makes them), so `ip -n` and
	// `tc -n` can reach them too.
	p.NsA = NewNamedNS(t, p.NameA)
	p.NsB = NewNamedNS(t, p.NameB)
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: p.IfA, Namespace: netlink.NsFd(p.NsA)},
		PeerName:  p.IfB, PeerNamespace: netlink.NsFd(p.NsB),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		FailOrSkip(t, "create veth pair: %v", err)
	}
	for _, side := range []struct {
		ns     netns.NsHandle
		dev    string
		v4, v6 string
	}{
		{p.NsA, p.IfA, "10.77.0.1/24", "fd77::1/64"},
		{p.NsB, p.IfB, "10.77.0.2/24", "fd77::2/64"},
	} {
		h, err := netlink.NewHandleAt(side.ns)
		if err != nil {
			t.Fatalf("netlink in namespace: %v", err)
		}
		defer h.Close()
		link, err := h.LinkByName(side.dev)
		if err != nil {
			t.Fatalf("find %s: %v", side.dev, err)
		}
		for _, a := range []string{side.v4, side.v6} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				t.Fatal(err)
			}
			addr.Flags = unix.IFA_F_NODAD // no duplicate address detection delay
			if err := h.AddrAdd(link, addr); err != nil {
				t.Fatalf("add %s to %s: %v", a, side.dev, err)
			}
		}
		lo, err := h.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		// No duplicate address detection on the link-local address either:
		// while it is tentative, neighbour discovery can stall the first
		// IPv6 connection for a second.
		var serr error
		In(t, side.ns, func() {
			serr = os.WriteFile("/proc/sys/net/ipv6/conf/"+side.dev+"/accept_dad", []byte("0"), 0o644)
		})
		if serr != nil {
			t.Fatalf("disable DAD on %s: %v", side.dev, serr)
		}
		for _, l := range []netlink.Link{link, lo} {
			if err := h.LinkSetUp(l); err != nil {
				t.Fatalf("set %s up: %v", l.Attrs().Name, err)
			}
		}
		waitIPv6Ready(t, h, link)
	}
	return p
}

// waitIPv6Ready polls until no IPv6 address on link is tentative (even
// with NODAD a kernel may hold one back briefly).
func waitIPv6Ready(t testing.TB, h *netlink.Handle, link netlink.Link) {
	t.Helper()
	wait.ForWhy(t, 5*time.Second, "IPv6 addresses on "+link.Attrs().Name+" ready", func() (bool, string) {
		addrs, err := h.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			t.Fatalf("list addresses: %v", err)
		}
		ready := len(addrs) > 0
		for _, a := range addrs {
			if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
				ready = false
			}
		}
		return ready, fmt.Sprintf("tentative: %v", addrs)
	})
}

// NewNamedNS creates a named network namespace, deleted at test end.
func NewNamedNS(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatalf("get netns: %v", err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name) // also moves this thread into it
	if rerr := netns.Set(orig); rerr != nil {
		runtime.LockOSThread() // keep the thread out of the pool: it is in the wrong namespace
		t.Fatalf("restore netns: %v", rerr)
	}
	if err != nil {
		FailOrSkip(t, "create network namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		netns.DeleteNamed(name)
	})
	return ns
}

// In runs f on a thread switched into ns. Sockets created by f stay in
// ns afterwards, whichever thread uses them.
func In(t testing.TB, ns netns.NsHandle, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get netns: %v", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("enter netns: %v", err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime discards it with this
			// goroutine rather than reuse a thread in the wrong namespace.
			t.Errorf("restore netns: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	f()
}

// ShapeTBF makes a token-bucket filter the root qdisc of dev in ns (as
// `tc qdisc add dev DEV root tbf rate R burst B latency L` does), so the
// link carries at most bytesPerSec. It fails the test if the kernel
// refuses.
func ShapeTBF(t testing.TB, ns netns.NsHandle, dev string, bytesPerSec float64, burst uint32, latency time.Duration) {
	t.Helper()
	var err error
	In(t, ns, func() {
		link, lerr := netlink.LinkByName(dev)
		if lerr != nil {
			err = lerr
			return
		}
		err = netlink.QdiscAdd(&netlink.Tbf{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
			Rate:       uint64(bytesPerSec), Buffer: netlink.Xmittime(uint64(bytesPerSec), burst), Limit: uint32(bytesPerSec*latency.Seconds()) + burst,
		})
	})
	if err != nil {
		t.Fatalf("shape %s with tbf: %v", dev, err)
	}
}

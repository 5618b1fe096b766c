package campus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// requireRoot skips (or, under CI=true, fails) a test that needs root and
// iproute2 to build namespaces.
func requireRoot(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root (network namespaces, veth, tc)"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "needs iproute2's ip: " + err.Error()
	} else if _, err := exec.LookPath("tc"); err != nil {
		why = "needs iproute2's tc: " + err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but the campus test cannot run: %s", why)
	}
	t.Skipf("skipping: %s", why)
}

func buildForTest(t *testing.T, topo Topology) *Campus {
	t.Helper()
	requireRoot(t)
	// A test binary killed by its timeout runs no cleanups: remove what
	// such dead runs left behind.
	if stale, err := CleanupStale(); err != nil {
		t.Logf("removing stale campuses %v: %v", stale, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Build(ctx, topo)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Logf("built campus %s (%d namespaces) in %v", c.Prefix(), len(c.NetNSNames()), time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// listen opens a TCP listener on node's address inside its namespace.
func listen(t *testing.T, c *Campus, node string) net.Listener {
	t.Helper()
	n, _ := c.Node(node)
	var ln net.Listener
	err := c.RunIn(node, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(n.Addr, 0).String())
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", node, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dial connects from node src to addr, inside src's namespace.
func dial(c *Campus, src, addr string, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := c.RunIn(src, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	return conn, err
}

// echoServer answers each connection by echoing what it reads.
func echoServer(t *testing.T, ln net.Listener) {
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				io.Copy(conn, conn)
			})
		}
	})
}

// errWhy is a wait.ForWhy condition's answer for an attempt that failed
// with err (nil: it succeeded).
func errWhy(err error) (bool, string) {
	if err != nil {
		return false, err.Error()
	}
	return true, ""
}

// roundTrip dials addr from src, sends a line and checks the echo.
func roundTrip(c *Campus, src, addr string, timeout time.Duration) error {
	conn, err := dial(c, src, addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	msg := "hello from " + src + "\n"
	if _, err := io.WriteString(conn, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echo %q, want %q", buf, msg)
	}
	return nil
}

// bulk runs one TCP bulk flow from src to dst and returns the goodput in
// bit/s measured over window after warm (slow start excluded), and the bytes
// received in all.
func bulk(t *testing.T, c *Campus, src, dst string, warm, window time.Duration) (bitsPerSec float64, total int64) {
	t.Helper()
	ln := listen(t, c, dst)
	var received atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	accepted := make(chan net.Conn, 1)
	wg.Go(func() {
		conn, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- conn
		buf := make([]byte, 256<<10)
		for {
			n, err := conn.Read(buf)
			received.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	conn, err := dial(c, src, ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s → %s: %v", src, dst, err)
	}
	rconn := <-accepted
	if rconn == nil {
		t.Fatalf("accept in %s failed", dst)
	}
	defer rconn.Close()
	stop := make(chan struct{})
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	})
	defer func() { close(stop); conn.Close() }()
	time.Sleep(warm) // measurement window, not synchronisation
	b0, t0 := received.Load(), time.Now()
	time.Sleep(window)
	b1, t1 := received.Load(), time.Now()
	return float64(b1-b0) * 8 / t1.Sub(t0).Seconds(), b1
}

func checkRate(t *testing.T, what string, got float64, want Rate) {
	t.Helper()
	lo, hi := 0.6*float64(want), 1.15*float64(want)
	t.Logf("%s: %.1f Mbit/s (shaped %v, %.0f%%)", what, got/1e6, want, 100*got/float64(want))
	if got < lo || got > hi {
		t.Errorf("%s: got %.1f Mbit/s, want %v within 0.6x-1.15x (%.1f-%.1f Mbit/s)", what, got/1e6, want, lo/1e6, hi/1e6)
	}
}

func counters(t *testing.T, c *Campus, link string) Counters {
	t.Helper()
	cs, err := c.Counters(link)
	if err != nil {
		t.Fatalf("Counters(%s): %v", link, err)
	}
	return cs
}

// rootV4 lists the root namespace's IPv4 addresses and routes (all tables)
// inside 10.77.0.0/16.
func rootV4InCampusRange(t *testing.T) []string {
	t.Helper()
	campusRange := netip.MustParsePrefix("10.77.0.0/16")
	in := func(ip net.IP) bool {
		a, ok := netip.AddrFromSlice(ip)
		return ok && campusRange.Contains(a.Unmap())
	}
	var found []string
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("root addresses: %v", err)
	}
	for _, a := range addrs {
		if in(a.IP) {
			found = append(found, "addr "+a.IPNet.String())
		}
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("root routes: %v", err)
	}
	for _, r := range routes {
		if (r.Dst != nil && in(r.Dst.IP)) || in(r.Gw) {
			found = append(found, "route "+r.String())
		}
	}
	return found
}

func TestCampus(t *testing.T) {
	requireRoot(t)
	rootBefore := rootV4InCampusRange(t)
	topo := SmallTopology()
	c := buildForTest(t, topo)

	t.Run("namespaces", func(t *testing.T) {
		names, err := listNamespaces()
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, n := range names {
			if strings.HasPrefix(n, c.Prefix()+"-") {
				got++
			}
		}
		if want := 1 + 3 + 6; got != want {
			t.Fatalf("got %d namespaces with prefix %s, want %d", got, c.Prefix(), want)
		}
	})

	t.Run("exec", func(t *testing.T) {
		n, _ := c.Node("b2")
		out, err := c.Exec(context.Background(), "b2", "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil {
			t.Fatalf("exec in b2: %v: %s", err, out)
		}
		if !strings.Contains(string(out), n.Addr.String()+"/24") {
			t.Fatalf("b2's eth0: got %q, want it to carry %s/24", out, n.Addr)
		}
		if err := c.Exec(context.Background(), "zz9", "true").Run(); !errors.Is(err, ErrUnknownNode) {
			t.Fatalf("exec in unknown node: got %v, want ErrUnknownNode", err)
		}
	})

	t.Run("all pairs connect", func(t *testing.T) {
		addrs := map[string]string{}
		for _, n := range c.Nodes() {
			ln := listen(t, c, n.Name)
			echoServer(t, ln)
			addrs[n.Name] = ln.Addr().String()
		}
		for _, src := range c.Nodes() {
			for _, dst := range c.Nodes() {
				if src.Name == dst.Name {
					continue
				}
				if err := roundTrip(c, src.Name, addrs[dst.Name], 5*time.Second); err != nil {
					t.Errorf("%s → %s (%s): %v", src.Name, dst.Name, addrs[dst.Name], err)
				}
			}
		}
	})

	t.Run("node routes stay inside the campus", func(t *testing.T) {
		campusRange := netip.MustParsePrefix("10.77.0.0/16")
		for _, n := range c.Nodes() {
			var routes []netlink.Route
			err := c.RunIn(n.Name, func() error {
				var err error
				routes, err = netlink.RouteList(nil, netlink.FAMILY_V4)
				return err
			})
			if err != nil {
				t.Fatalf("routes of %s: %v", n.Name, err)
			}
			if len(routes) == 0 {
				t.Fatalf("%s has no routes", n.Name)
			}
			for _, r := range routes {
				if r.Dst == nil {
					t.Errorf("%s has a default route %v, want only 10.77.0.0/16", n.Name, r)
					continue
				}
				dst, _ := netip.AddrFromSlice(r.Dst.IP)
				if ones, _ := r.Dst.Mask.Size(); !campusRange.Contains(dst.Unmap()) || ones < 16 {
					t.Errorf("%s has route %v outside 10.77.0.0/16", n.Name, r.Dst)
				}
			}
		}
	})

	t.Run("root namespace untouched", func(t *testing.T) {
		after := rootV4InCampusRange(t)
		if len(after) != len(rootBefore) {
			t.Fatalf("root namespace campus-range entries: before %v, after build %v; want no change", rootBefore, after)
		}
	})

	t.Run("same building runs at access rate", func(t *testing.T) {
		upBefore := counters(t, c, "uplink:a")
		accBefore := counters(t, c, "access:a1")
		got, total := bulk(t, c, "a1", "a2", 500*time.Millisecond, 3*time.Second)
		checkRate(t, "a1→a2", got, topo.AccessRate)
		up := counters(t, c, "uplink:a")
		acc := counters(t, c, "access:a1")
		if sent := acc.AtoBBytes - accBefore.AtoBBytes; sent < uint64(total) {
			t.Errorf("access:a1 A→B counted %d bytes, want ≥ the %d received", sent, total)
		}
		if leak := up.AtoBBytes - upBefore.AtoBBytes; leak > uint64(total)/100+64<<10 {
			t.Errorf("uplink:a carried %d bytes of a same-building flow of %d, want ≈ 0", leak, total)
		}
	})

	t.Run("cross building runs at uplink rate", func(t *testing.T) {
		upA0, upB0 := counters(t, c, "uplink:a"), counters(t, c, "uplink:b")
		got, total := bulk(t, c, "a1", "b1", 500*time.Millisecond, 3*time.Second)
		checkRate(t, "a1→b1", got, topo.UplinkRate)
		upA, upB := counters(t, c, "uplink:a"), counters(t, c, "uplink:b")
		if d := upA.AtoBBytes - upA0.AtoBBytes; d < uint64(total) {
			t.Errorf("uplink:a A→B counted %d bytes, want ≥ the %d received", d, total)
		}
		if d := upB.BtoABytes - upB0.BtoABytes; d < uint64(total) {
			t.Errorf("uplink:b B→A counted %d bytes, want ≥ the %d received", d, total)
		}
	})

	t.Run("iperf3 via Exec", func(t *testing.T) {
		if _, err := exec.LookPath("iperf3"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("iperf3 not installed (CI installs it with .ci/run): %v", err)
			}
			t.Skipf("skipping: iperf3 not installed: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv, _ := c.Node("c1")
		// A fixed port is safe: c1's namespace exists only for this campus.
		server := c.Exec(ctx, "c1", "iperf3", "-s", "-B", srv.Addr.String(), "-p", "5201")
		if err := server.Start(); err != nil {
			t.Fatalf("start iperf3 server in c1: %v", err)
		}
		defer func() { server.Process.Kill(); server.Wait() }()
		var out []byte
		// Until the server listens, the client cannot connect.
		wait.ForWhy(t, 10*time.Second, "iperf3 client b1 → c1", func() (bool, string) {
			var err error
			out, err = c.Exec(ctx, "b1", "iperf3", "-c", srv.Addr.String(), "-p", "5201", "-t", "3", "-O", "1", "-J").Output()
			if err == nil && !strings.Contains(string(out), "unable to connect") {
				return true, ""
			}
			return false, fmt.Sprintf("%v: %s", err, out)
		})
		var res struct {
			Error string `json:"error"`
			End   struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("parse iperf3 JSON: %v", err)
		}
		if res.Error != "" {
			t.Fatalf("iperf3 client b1 → c1: %s", res.Error)
		}
		checkRate(t, "iperf3 b1→c1", res.End.SumReceived.BitsPerSecond, topo.UplinkRate)
	})

	t.Run("set rate at runtime", func(t *testing.T) {
		ctx := context.Background()
		const slow = 20 * Mbit
		if err := c.SetRate(ctx, "uplink:b", slow); err != nil {
			t.Fatalf("SetRate: %v", err)
		}
		t.Cleanup(func() {
			if err := c.SetRate(ctx, "uplink:b", topo.UplinkRate); err != nil {
				t.Errorf("restore rate: %v", err)
			}
		})
		if r, _ := c.Rate("uplink:b"); r != slow {
			t.Fatalf("Rate(uplink:b) = %v, want %v", r, slow)
		}
		got, _ := bulk(t, c, "a2", "b2", 500*time.Millisecond, 3*time.Second)
		checkRate(t, "a2→b2 after SetRate(uplink:b, 20Mbit/s)", got, slow)
		if err := c.SetRate(ctx, "uplink:zz", slow); !errors.Is(err, ErrUnknownLink) {
			t.Fatalf("SetRate on unknown link: got %v, want ErrUnknownLink", err)
		}
	})

	t.Run("building partition", func(t *testing.T) {
		c2 := listen(t, c, "c2")
		echoServer(t, c2)
		if err := c.SetLinkUp("uplink:c", false); err != nil {
			t.Fatalf("SetLinkUp(uplink:c, false): %v", err)
		}
		if err := roundTrip(c, "a1", c2.Addr().String(), 700*time.Millisecond); err == nil {
			t.Errorf("a1 → c2 with building c cut off: got success, want failure")
		} else {
			t.Logf("a1 → c2 with building c cut off fails as it should: %v", err)
		}
		if err := roundTrip(c, "c1", c2.Addr().String(), 5*time.Second); err != nil {
			t.Errorf("c1 → c2 inside the cut-off building: %v, want success", err)
		}
		if err := c.SetLinkUp("uplink:c", true); err != nil {
			t.Fatalf("SetLinkUp(uplink:c, true): %v", err)
		}
		wait.ForWhy(t, 10*time.Second, "a1 → c2 after healing", func() (bool, string) {
			return errWhy(roundTrip(c, "a1", c2.Addr().String(), time.Second))
		})
	})

	t.Run("all counters", func(t *testing.T) {
		all, err := c.AllCounters()
		if err != nil {
			t.Fatalf("AllCounters: %v", err)
		}
		if got, want := len(all), len(c.Links()); got != want {
			t.Fatalf("AllCounters has %d links, want %d", got, want)
		}
		// The bulk flows above crossed access:a1 from a1 (A) to the switch.
		if got := all["access:a1"].AtoBBytes; got < 1<<20 {
			t.Errorf("access:a1 A→B = %d bytes, want > 1 MiB after the bulk flows", got)
		}
	})

	t.Run("partition and reconnect", func(t *testing.T) {
		ln := listen(t, c, "b2")
		echoServer(t, ln)
		peer := listen(t, c, "a2")
		echoServer(t, peer)
		if err := roundTrip(c, "a1", ln.Addr().String(), 5*time.Second); err != nil {
			t.Fatalf("before partition a1 → b2: %v", err)
		}
		if err := c.Disconnect("b2"); err != nil {
			t.Fatalf("Disconnect: %v", err)
		}
		for _, src := range []string{"a1", "b1"} {
			if err := roundTrip(c, src, ln.Addr().String(), 700*time.Millisecond); err == nil {
				t.Errorf("%s → b2 while b2 is disconnected: got success, want failure", src)
			} else {
				t.Logf("%s → b2 while b2 is disconnected fails as it should: %v", src, err)
			}
		}
		if err := roundTrip(c, "a1", peer.Addr().String(), 5*time.Second); err != nil {
			t.Errorf("a1 → a2 while b2 is disconnected: %v, want success", err)
		}
		if err := c.Reconnect("b2"); err != nil {
			t.Fatalf("Reconnect: %v", err)
		}
		wait.ForWhy(t, 10*time.Second, "a1 → b2 after Reconnect", func() (bool, string) {
			return errWhy(roundTrip(c, "a1", ln.Addr().String(), time.Second))
		})
	})
}

func TestDelayNeedsNetem(t *testing.T) {
	requireRoot(t)
	topo := Topology{Buildings: []Building{{Name: "x", Nodes: 1}, {Name: "y", Nodes: 1}},
		AccessRate: 100 * Mbit, UplinkRate: 100 * Mbit, Delay: 20 * time.Millisecond}
	c, err := Build(context.Background(), topo)
	if errors.Is(err, ErrNetemUnavailable) {
		// The kernel lacks netem: Build must say so and leave nothing behind.
		if left := namespacesWithPrefix(t, fmt.Sprintf("cb%dx", os.Getpid())); len(left) != 0 {
			// other tests of this process may run in parallel only if marked; they are not
			t.Fatalf("failed Build left namespaces %v", left)
		}
		t.Logf("kernel lacks netem: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("Build with delay: %v", err)
	}
	defer c.Close()
	ln := listen(t, c, "y1")
	echoServer(t, ln)
	start := time.Now()
	if err := roundTrip(c, "x1", ln.Addr().String(), 5*time.Second); err != nil {
		t.Fatalf("x1 → y1: %v", err)
	}
	// connect (1 RTT) + echo (1 RTT), 4 link directions each way x 20 ms
	if got, want := time.Since(start), 2*8*20*time.Millisecond; got < want {
		t.Fatalf("x1 → y1 round trips took %v, want ≥ %v with 20 ms per link", got, want)
	}
}

func namespacesWithPrefix(t *testing.T, prefix string) []string {
	t.Helper()
	names, err := listNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

func TestCloseRemovesEverything(t *testing.T) {
	requireRoot(t)
	topo := Topology{Buildings: []Building{{Name: "x", Nodes: 1}, {Name: "y", Nodes: 2}},
		AccessRate: 100 * Mbit, UplinkRate: 50 * Mbit}
	c := buildForTest(t, topo)

	// Hold every namespace open, so we can look inside after Close removed
	// their names: a held namespace keeps interfaces alive unless Close
	// deletes them itself.
	var held []netns.NsHandle
	for _, ns := range c.NetNSNames() {
		h, err := netns.GetFromName(ns)
		if err != nil {
			t.Fatalf("open %s: %v", ns, err)
		}
		held = append(held, h)
		t.Cleanup(func() { h.Close() })
	}
	// A socket created inside a node also pins its namespace.
	ln := listen(t, c, "y2")
	defer ln.Close()

	// A long-running process inside a node.
	agent := c.Exec(context.Background(), "x1", "sleep", "300")
	if err := agent.Start(); err != nil {
		t.Fatalf("start sleep in x1: %v", err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = agent.Wait(); close(exited) }()
	t.Cleanup(func() {
		agent.Process.Kill()
		<-exited
	})
	// `ip netns exec` joins the namespace after Start returns; wait until the
	// process is inside before closing.
	x1, _ := c.Node("x1")
	var nsStat syscall.Stat_t
	if err := syscall.Stat(x1.NetNSPath(), &nsStat); err != nil {
		t.Fatalf("stat %s: %v", x1.NetNSPath(), err)
	}
	wait.For(t, 10*time.Second, fmt.Sprintf("sleep (pid %d) inside %s", agent.Process.Pid, x1.NetNS), func() bool {
		var st syscall.Stat_t
		return syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", agent.Process.Pid), &st) == nil && st.Ino == nsStat.Ino && st.Dev == nsStat.Dev
	})

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if left := namespacesWithPrefix(t, c.Prefix()+"-"); len(left) != 0 {
		t.Errorf("after Close: namespaces %v remain, want none", left)
	}
	for i, h := range held {
		nh, err := netlink.NewHandleAt(h)
		if err != nil {
			t.Fatalf("netlink in held namespace %d: %v", i, err)
		}
		links, err := nh.LinkList()
		nh.Close()
		if err != nil {
			t.Fatalf("links in held namespace %d: %v", i, err)
		}
		for _, l := range links {
			if l.Attrs().Name != "lo" {
				t.Errorf("after Close: namespace %s still has interface %s", c.NetNSNames()[i], l.Attrs().Name)
			}
		}
	}
	select {
	case <-exited:
		if waitErr == nil {
			t.Errorf("sleep in x1 exited cleanly, want it killed by Close")
		}
	case <-time.After(10 * time.Second):
		t.Errorf("sleep in x1 still running 10s after Close, want it killed")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	if err := c.SetLinkUp("access:x1", false); !errors.Is(err, ErrClosed) {
		t.Errorf("SetLinkUp after Close: got %v, want ErrClosed", err)
	}
}

func TestCleanup(t *testing.T) {
	requireRoot(t)
	if err := Cleanup("rnA-d370c6"); err == nil {
		t.Fatal(`Cleanup("rnA-d370c6"): got nil, want an error for a non-campus prefix`)
	}
	if err := Cleanup(""); err == nil {
		t.Fatal(`Cleanup(""): got nil, want an error`)
	}

	live := buildForTest(t, Topology{Buildings: []Building{{Name: "x", Nodes: 1}}, AccessRate: 10 * Mbit, UplinkRate: 10 * Mbit})

	// A campus left by a process that has exited: its pid is in the prefix.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatalf("run true: %v", err)
	}
	stalePrefix := fmt.Sprintf("cb%dx0bad", gone.Process.Pid)
	staleNS := stalePrefix + "-x1"
	if err := run(context.Background(), "ip", "netns", "add", staleNS); err != nil {
		t.Fatalf("create stale namespace: %v", err)
	}
	t.Cleanup(func() { Cleanup(stalePrefix) })

	removed, err := CleanupStale()
	if err != nil {
		t.Fatalf("CleanupStale: %v", err)
	}
	found := false
	for _, p := range removed {
		if p == stalePrefix {
			found = true
		}
		if p == live.Prefix() {
			t.Errorf("CleanupStale removed the live campus %s", p)
		}
	}
	if !found {
		t.Errorf("CleanupStale removed %v, want it to include %s", removed, stalePrefix)
	}
	if left := namespacesWithPrefix(t, stalePrefix); len(left) != 0 {
		t.Errorf("after CleanupStale: %v remain", left)
	}
	if left := namespacesWithPrefix(t, live.Prefix()+"-"); len(left) != 3 {
		t.Errorf("live campus has %v after CleanupStale, want its 3 namespaces", left)
	}

	if err := Cleanup(live.Prefix()); err != nil {
		t.Fatalf("Cleanup(%s): %v", live.Prefix(), err)
	}
	if left := namespacesWithPrefix(t, live.Prefix()+"-"); len(left) != 0 {
		t.Errorf("after Cleanup: %v remain", left)
	}
}

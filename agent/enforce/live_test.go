package enforce

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
)

// The node under test lives in namespace A (p.a4) and sends; the peer in
// namespace B (p.b4) is building "bldg-b".

// startNode starts an Enforcer on A's veth; it stops at test end.
func startNode(t *testing.T, p *netPair, cfg Config) *Enforcer {
	t.Helper()
	cfg.Node = "n-" + p.nameA
	cfg.Iface = p.ifA
	cfg.PinDir = testPinDir(t)
	if cfg.Capacity == 0 {
		cfg.Capacity = 50e6
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(a netip.Addr) (string, bool) {
			if a == p.b4 || a == p.b6 {
				return "bldg-b", true
			}
			return "", false
		}
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in(t, p.nsA, func() { err = e.Start(context.Background()) })
	if err != nil {
		failOrSkip(t, "start enforcement: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return e
}

// udpSink counts the bytes it receives and remembers the TOS byte of the
// latest datagram.
type udpSink struct {
	addr     netip.AddrPort
	received atomic.Int64
	tos      atomic.Int32
	err      atomic.Value // string: why the reader stopped
}

// waitReceiving polls until the sink has received something.
func (s *udpSink) waitReceiving(t *testing.T, snd *sender) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.received.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sink %s received nothing in 5 s (sender wrote %d bytes, last send error %v, reader stopped: %v)", s.addr, snd.sent.Load(), snd.err.Load(), s.err.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startUDPSink(t *testing.T, ns netns.NsHandle, ip netip.Addr) *udpSink {
	t.Helper()
	var (
		c   *net.UDPConn
		err error
	)
	in(t, ns, func() { c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0))) })
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	c.SetReadBuffer(8 << 20)
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1) })
	if serr != nil {
		t.Fatalf("IP_RECVTOS: %v", serr)
	}
	s := &udpSink{addr: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	s.tos.Store(-1)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		oob := make([]byte, 128)
		for {
			n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
			if err != nil {
				s.err.Store(err.Error())
				return
			}
			s.received.Add(int64(n))
			msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			if perr != nil {
				continue
			}
			for _, m := range msgs {
				if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 {
					s.tos.Store(int32(m.Data[0]))
				}
			}
		}
	})
	t.Cleanup(func() { c.Close(); wg.Wait() })
	return s
}

// sender sends payload-sized writes paced at bytesPerSec until the test
// ends, counting the payload bytes written.
type sender struct {
	local netip.AddrPort
	sent  atomic.Int64
	err   atomic.Value // error: the last write error ignored
}

func startUDPSender(t *testing.T, ns netns.NsHandle, local netip.Addr, to netip.AddrPort, bytesPerSec float64) *sender {
	t.Helper()
	var (
		c   *net.UDPConn
		err error
	)
	in(t, ns, func() {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)), net.UDPAddrFromAddrPort(to))
	})
	if err != nil {
		t.Fatalf("dial udp: %v", err)
	}
	s := &sender{local: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	runPaced(t, bytesPerSec, 1200, func(b []byte) error {
		n, err := c.Write(b)
		s.sent.Add(int64(n))
		if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ECONNREFUSED) {
			s.err.Store(err)
			return nil // dropped below us (the ceiling, a full queue): keep sending
		}
		return err
	}, func() { c.Close() })
	return s
}

func startTCPSender(t *testing.T, ns netns.NsHandle, local netip.Addr, to netip.AddrPort, bytesPerSec float64) *sender {
	t.Helper()
	var (
		c   *net.TCPConn
		err error
	)
	in(t, ns, func() {
		c, err = net.DialTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0)), net.TCPAddrFromAddrPort(to))
	})
	if err != nil {
		t.Fatalf("dial tcp: %v", err)
	}
	s := &sender{local: c.LocalAddr().(*net.TCPAddr).AddrPort()}
	runPaced(t, bytesPerSec, 16<<10, func(b []byte) error {
		n, err := c.Write(b)
		s.sent.Add(int64(n))
		return err
	}, func() { c.Close() })
	return s
}

// runPaced calls write with chunk-sized buffers at bytesPerSec until test
// end; closeFn unblocks a pending write.
func runPaced(t *testing.T, bytesPerSec float64, chunk int, write func([]byte) error, closeFn func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		lim := rate.NewLimiter(rate.Limit(bytesPerSec), 64<<10)
		buf := make([]byte, chunk)
		for {
			if err := lim.WaitN(ctx, chunk); err != nil {
				return
			}
			if err := write(buf); err != nil {
				if ctx.Err() == nil {
					t.Errorf("send: %v", err)
				}
				return
			}
		}
	})
	t.Cleanup(func() { cancel(); closeFn(); wg.Wait() })
}

// startTCPSink accepts connections and discards what they send.
func startTCPSink(t *testing.T, ns netns.NsHandle, ip netip.Addr) netip.AddrPort {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	in(t, ns, func() { ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String()) })
	if err != nil {
		t.Fatalf("listen tcp: %v", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// rateOver returns the rate at which counter grows over d.
func rateOver(counter *atomic.Int64, d time.Duration) float64 {
	b0, t0 := counter.Load(), time.Now()
	time.Sleep(d)
	return float64(counter.Load()-b0) / time.Since(t0).Seconds()
}

func buildingRates(t *testing.T, e *Enforcer, building string) (BuildingRates, Stats) {
	t.Helper()
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Buildings {
		if b.Building == building {
			return b, st
		}
	}
	return BuildingRates{Building: building}, st
}

// TestLiveTelemetry sends UDP and TCP traffic paced at known rates from
// the node: the sampler's non-migration figure towards the peer's
// building must match what was sent, and the published estimate must be
// capacity minus that traffic.
func TestLiveTelemetry(t *testing.T) {
	p := newNetPair(t)
	const capacity = 50e6
	var (
		pubMu  sync.Mutex
		latest []mesh.BuildingBandwidth
		pubs   int
	)
	bw := policy.BandwidthConfig{Capacity: capacity, HalfLife: 500 * time.Millisecond, Confidence: 0.9, Shortfall: 0.9}
	e := startNode(t, p, Config{Capacity: capacity, Bandwidth: &bw, PublishEvery: 200 * time.Millisecond,
		Publish: func(b []mesh.BuildingBandwidth) { pubMu.Lock(); latest, pubs = b, pubs+1; pubMu.Unlock() }})

	udpSink := startUDPSink(t, p.nsB, p.b4)
	tcpSink := startTCPSink(t, p.nsB, p.b4)
	udp := startUDPSender(t, p.nsA, p.a4, udpSink.addr, 6e6)
	tcp := startTCPSender(t, p.nsA, p.a4, tcpSink, 4e6)

	time.Sleep(1500 * time.Millisecond) // warm-up: three half-lives
	// Average the sampler's figure over 2 s next to what the senders wrote.
	u0, c0, t0 := udp.sent.Load(), tcp.sent.Load(), time.Now()
	var sum float64
	var n int
	tick := time.NewTicker(100 * time.Millisecond)
	for range tick.C {
		r, _ := buildingRates(t, e, "bldg-b")
		sum += r.NonMigration
		n++
		if time.Since(t0) >= 2*time.Second {
			break
		}
	}
	tick.Stop()
	secs := time.Since(t0).Seconds()
	sent := float64(udp.sent.Load()-u0+tcp.sent.Load()-c0) / secs
	sampled := sum / float64(n)
	t.Logf("sent %.2f MB/s (payload), sampler saw %.2f MB/s non-migration (wire) over %d samples", sent/1e6, sampled/1e6, n)
	if sent < 5e6 {
		t.Fatalf("senders managed only %.2f MB/s of the 10 MB/s asked: the machine is too loaded to measure", sent/1e6)
	}
	// Wire bytes include the headers (~4 %); the sampler's windows and the
	// senders' do not line up exactly.
	if sampled < 0.8*sent || sampled > 1.3*sent {
		t.Errorf("non-migration rate to bldg-b = %.2f MB/s, want within [0.8, 1.3] × %.2f MB/s sent", sampled/1e6, sent/1e6)
	}
	r, st := buildingRates(t, e, "bldg-b")
	if r.Migration != 0 {
		t.Errorf("migration rate to bldg-b = %.0f B/s with no flow installed, want 0", r.Migration)
	}
	if !st.Enabled || st.Attach["egress"] == "" {
		t.Errorf("stats say enabled=%v attach=%v, want enabled with egress attached", st.Enabled, st.Attach)
	}
	pubMu.Lock()
	got, count := latest, pubs
	pubMu.Unlock()
	if count < 5 || len(got) != 1 || got[0].Building != "bldg-b" {
		t.Fatalf("published %d times, latest %+v; want ≥ 5 reports with bldg-b only", count, got)
	}
	want := capacity - sent
	if math.Abs(got[0].Available-want) > 0.3*sent || got[0].AvailableLow > got[0].Available {
		t.Errorf("published available %.2f MB/s (low %.2f), want %.2f ± %.2f (capacity − sent)", got[0].Available/1e6, got[0].AvailableLow/1e6, want/1e6, 0.3*sent/1e6)
	}
	if bw := e.Bandwidth(); len(bw) != 1 || math.Abs(bw[0].Available-got[0].Available) > 0.3*sent {
		t.Errorf("Bandwidth() = %+v, want bldg-b near the published %.2f MB/s", bw, got[0].Available/1e6)
	}
	// A transfer to bldg-b reaching 5 of its 20 MB/s lowers the estimate
	// by about the 15 MB/s it missed.
	before := got[0].Available
	e.ObserveTransfer("bldg-b", 20e6, 5e6)
	deadline := time.Now().Add(3 * time.Second)
	for {
		r, _ := buildingRates(t, e, "bldg-b")
		if r.Available < before-5e6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("available to bldg-b %.2f MB/s 3 s after a 15 MB/s shortfall, want below %.2f", r.Available/1e6, (before-5e6)/1e6)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLiveFlowCeiling binds a flow to a sender socket sending at ~7× the
// flow's ceiling: the kernel marks it AF41 and holds it near the ceiling,
// counting drops as violations and its bytes as migration; removing the
// binding restores the sender's rate and its unmarked packets.
func TestLiveFlowCeiling(t *testing.T) {
	p := newNetPair(t)
	e := startNode(t, p, Config{})
	sink := startUDPSink(t, p.nsB, p.b4)
	const offered = 15e6
	snd := startUDPSender(t, p.nsA, p.a4, sink.addr, offered)
	sink.waitReceiving(t, snd)

	free := rateOver(&sink.received, time.Second)
	const assigned = 2e6
	ceiling := MinCeilingFactor * assigned // the bucket counts wire bytes: payload is ~4 % less
	if free < 3*ceiling {
		t.Fatalf("sender reached only %.2f MB/s unbound (wrote %d bytes, last error %v), need ≥ %.2f to test a %.2f MB/s ceiling (machine overloaded?)", free/1e6, snd.sent.Load(), snd.err.Load(), 3*ceiling/1e6, ceiling/1e6)
	}
	b := FlowBinding{LocalPort: snd.local.Port(), Dst: sink.addr,
		Decision: policy.FlowDecision{ID: "f1", Class: policy.ClassMigration, Rate: assigned}}
	if err := e.ApplyFlows([]FlowBinding{b}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the 256 KiB burst drains
	held := rateOver(&sink.received, 2*time.Second)
	tos := sink.tos.Load()
	fs, err := e.FlowStats(b)
	if err != nil {
		t.Fatal(err)
	}
	r, st := buildingRates(t, e, "bldg-b")
	t.Logf("unbound %.2f MB/s; bound %.2f MB/s (ceiling %.2f); flow passed %d, dropped %d packets; sampler: migration %.2f, other %.2f MB/s",
		free/1e6, held/1e6, ceiling/1e6, fs.PassedPackets, fs.DroppedPackets, r.Migration/1e6, r.NonMigration/1e6)
	if held > 1.25*ceiling || held < 0.5*ceiling {
		t.Errorf("bound sender delivered %.2f MB/s, want within [0.5, 1.25] × %.2f MB/s ceiling", held/1e6, ceiling/1e6)
	}
	if want := int32(policy.ClassMigration.DSCP()) << 2; tos&^3 != want {
		t.Errorf("TOS of a bound packet = %#x, want DSCP AF41 (%#x)", tos, want)
	}
	if fs.DroppedPackets == 0 || st.PolicyViolations < fs.DroppedPackets {
		t.Errorf("dropped %d packets (stats: %d violations), want > 0 for a sender over its ceiling", fs.DroppedPackets, st.PolicyViolations)
	}
	if fs.Rate != uint64(ceiling) || fs.Burst != MinBurst {
		t.Errorf("kernel bucket %d B/s, burst %d; want %d, %d", fs.Rate, fs.Burst, uint64(ceiling), MinBurst)
	}
	if r.Migration < 0.5*ceiling || r.NonMigration > 0.5*ceiling {
		t.Errorf("sampler: migration %.2f, non-migration %.2f MB/s; want the bound flow counted as migration", r.Migration/1e6, r.NonMigration/1e6)
	}

	if err := e.ApplyFlows(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.FlowStats(b); err == nil {
		t.Error("flow still in the kernel table after ApplyFlows(nil)")
	}
	time.Sleep(100 * time.Millisecond)
	restored := rateOver(&sink.received, time.Second)
	if restored < 3*ceiling {
		t.Errorf("unbound again the sender delivers %.2f MB/s, want ≥ %.2f (3 × the removed ceiling)", restored/1e6, 3*ceiling/1e6)
	}
	if tos := sink.tos.Load(); tos&^3 != 0 {
		t.Errorf("TOS after removal = %#x, want unmarked", tos)
	}
}

type entry struct {
	class       policy.TrafficClass
	rate, burst uint64
}

func kernelTable(t *testing.T, m *bpf.Maps) map[bpf.FlowKey]entry {
	t.Helper()
	fs, err := m.FlowStats()
	if err != nil {
		t.Fatal(err)
	}
	out := map[bpf.FlowKey]entry{}
	for _, f := range fs {
		out[f.Key] = entry{f.Class, f.Rate, f.Burst}
	}
	return out
}

func sameTable(got, want map[bpf.FlowKey]entry) error {
	if len(got) != len(want) {
		return fmt.Errorf("table has %d flows, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			return fmt.Errorf("flow %s = %+v (present %v), want %+v", k, g, ok, w)
		}
	}
	return nil
}

// TestLiveApplyFlowsIdempotent: the kernel table equals the given set,
// applying it again changes nothing, changes are applied, stale entries
// (ours or anyone's) are removed, and a bad binding keeps its old entry.
func TestLiveApplyFlowsIdempotent(t *testing.T) {
	p := newNetPair(t)
	e := startNode(t, p, Config{})
	other, err := bpf.OpenPinned(e.cfg.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	dst := netip.AddrPortFrom(p.b4, 7948)
	bind := func(port uint16, class policy.TrafficClass, r float64) FlowBinding {
		return FlowBinding{LocalPort: port, Dst: dst, Decision: policy.FlowDecision{ID: fmt.Sprint(port), Class: class, Rate: r, Ceiling: 1.1 * r, Burst: 512 << 10}}
	}
	set := []FlowBinding{bind(40001, policy.ClassMigration, 10e6), bind(40002, policy.ClassPresync, 5e6), bind(40003, policy.ClassEmergency, 1e6)}
	want := map[bpf.FlowKey]entry{}
	for _, b := range set {
		r, bu, _ := bucket(b.Decision)
		want[b.Key()] = entry{b.Decision.Class, r, bu}
	}
	for i := range 2 {
		if err := e.ApplyFlows(set); err != nil {
			t.Fatalf("apply #%d: %v", i+1, err)
		}
		if err := sameTable(kernelTable(t, other), want); err != nil {
			t.Fatalf("after apply #%d: %v", i+1, err)
		}
	}
	// A stale entry nobody asked for (say a crashed transfer's) goes.
	stale := bpf.FlowKey{Proto: bpf.ProtoUDP, SrcPort: 49999, Dst: dst}
	if err := other.SetFlow(stale, policy.ClassPresync, 1e6, 1<<20); err != nil {
		t.Fatal(err)
	}
	// Change one rate, drop one flow.
	set = []FlowBinding{bind(40001, policy.ClassMigration, 20e6), bind(40002, policy.ClassPresync, 5e6)}
	want = map[bpf.FlowKey]entry{}
	for _, b := range set {
		r, bu, _ := bucket(b.Decision)
		want[b.Key()] = entry{b.Decision.Class, r, bu}
	}
	if err := e.ApplyFlows(set); err != nil {
		t.Fatal(err)
	}
	if err := sameTable(kernelTable(t, other), want); err != nil {
		t.Fatalf("after change: %v", err)
	}
	// A binding without a rate is refused with a clear error; its old
	// entry stays, the rest still applies.
	bad := bind(40002, policy.ClassPresync, 0)
	newer := bind(40004, policy.ClassMigration, 3e6)
	err = e.ApplyFlows([]FlowBinding{bind(40001, policy.ClassMigration, 20e6), bad, newer})
	if err == nil || !strings.Contains(err.Error(), "positive rate") {
		t.Errorf("apply with a zero-rate binding: err = %v, want one about the rate", err)
	}
	r, bu, _ := bucket(newer.Decision)
	want[newer.Key()] = entry{newer.Decision.Class, r, bu}
	if err := sameTable(kernelTable(t, other), want); err != nil {
		t.Fatalf("after a bad binding: %v", err)
	}
	// Two bindings for one socket: refused, the others applied.
	err = e.ApplyFlows([]FlowBinding{bind(40001, policy.ClassMigration, 20e6), newer, newer})
	if err == nil || !strings.Contains(err.Error(), "two bindings") {
		t.Errorf("duplicate binding: err = %v, want one naming it", err)
	}
	if err := e.ApplyFlows(nil); err != nil {
		t.Fatal(err)
	}
	if got := kernelTable(t, other); len(got) != 0 {
		t.Errorf("table after ApplyFlows(nil) = %v, want empty", got)
	}
}

// TestLiveKillSwitch: soft mode blocks new QUIC connections to the
// transfer port and new TCP connections to a job port, keeps established
// ones and other ports working; off lets new connections in again.
func TestLiveKillSwitch(t *testing.T) {
	p := newNetPair(t)
	serverTLS, clientTLS := selfSignedTLS(t)
	quicSrv := startQUICServer(t, p.nsA, p.a4, serverTLS, false)
	job := startTCPEcho(t, p.nsA, p.a4)
	owner := startTCPEcho(t, p.nsA, p.a4) // the owner's own service: never touched
	e := startNode(t, p, Config{
		TransferPort: uint16(quicSrv.addr.Port),
		JobPorts:     []bpf.Port{{Proto: bpf.ProtoTCP, Number: uint16(job.Port)}},
		ControlPorts: []uint16{uint16(owner.Port)},
	})
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.KillSwitch != "off" || len(st.Protected) != 2 {
		t.Fatalf("at start: kill-switch %s, protected %v; want off with 2 ports", st.KillSwitch, st.Protected)
	}
	established, err := dialTCP(t, p.nsB, job, 5*time.Second)
	if err != nil {
		t.Fatalf("dial job before the switch: %v", err)
	}
	if err := tcpEcho(established, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, _, err := dialQUIC(t, p.nsB, p.b4, quicSrv.addr, clientTLS, 5*time.Second)
	if err != nil {
		t.Fatalf("dial QUIC before the switch: %v", err)
	}
	if err := quicEcho(conn, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := e.SetKillSwitch(bpf.ModeSoft); err != nil {
		t.Fatal(err)
	}
	if _, err := dialTCP(t, p.nsB, job, time.Second); err == nil {
		t.Error("new TCP connection to the job port succeeded in soft mode")
	}
	if _, _, err := dialQUIC(t, p.nsB, p.b4, quicSrv.addr, clientTLS, time.Second); err == nil {
		t.Error("new QUIC connection to the transfer port succeeded in soft mode")
	}
	if err := tcpEcho(established, 5*time.Second); err != nil {
		t.Errorf("established TCP connection broken by soft mode: %v", err)
	}
	if err := quicEcho(conn, 5*time.Second); err != nil {
		t.Errorf("established QUIC connection broken by soft mode: %v", err)
	}
	if c, err := dialTCP(t, p.nsB, owner, 5*time.Second); err != nil {
		t.Errorf("owner's unprotected port refused in soft mode: %v", err)
	} else if err := tcpEcho(c, 5*time.Second); err != nil {
		t.Errorf("owner's unprotected port: %v", err)
	}
	st, err = e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.KillSwitch != "soft" || st.KillSwitchDropSYN == 0 || st.KillSwitchDropQUIC == 0 {
		t.Errorf("stats: mode %s, %d SYN and %d QUIC drops; want soft with both > 0", st.KillSwitch, st.KillSwitchDropSYN, st.KillSwitchDropQUIC)
	}

	if err := e.SetKillSwitch(bpf.ModeOff); err != nil {
		t.Fatal(err)
	}
	if _, err := dialTCP(t, p.nsB, job, 5*time.Second); err != nil {
		t.Errorf("new TCP connection after switching off: %v", err)
	}
	if _, _, err := dialQUIC(t, p.nsB, p.b4, quicSrv.addr, clientTLS, 5*time.Second); err != nil {
		t.Errorf("new QUIC connection after switching off: %v", err)
	}
}

// TestLiveStartErrors: a missing interface is named; a second Start is
// refused; the pins are gone after Stop.
func TestLiveStartErrors(t *testing.T) {
	requirePrivileged(t)
	e, err := New(Config{Node: "n", Iface: "rn-no-such-if", PinDir: testPinDir(t), Capacity: 1e6,
		Resolve: func(netip.Addr) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "rn-no-such-if") {
		t.Errorf("Start on a missing interface: err = %v, want one naming the interface", err)
	}
	if e.Enabled() {
		t.Error("Enabled() after a failed Start")
	}
	p := newNetPair(t)
	e2 := startNode(t, p, Config{})
	var err2 error
	in(t, p.nsA, func() { err2 = e2.Start(context.Background()) })
	if err2 == nil {
		t.Error("second Start succeeded")
	}
	dir := e2.cfg.PinDir
	if err := e2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := bpf.OpenPinned(dir); !errors.Is(err, bpf.ErrNotPinned) {
		t.Errorf("after Stop, OpenPinned(%s) = %v, want ErrNotPinned", dir, err)
	}
}

// TestLiveSwitchOutlivesStop: an agent stopped with the switch on leaves
// it in force (the owner's decision); a restarted agent keeps the pinned
// mode; switched off, Stop removes everything.
func TestLiveSwitchOutlivesStop(t *testing.T) {
	p := newNetPair(t)
	job := startTCPEcho(t, p.nsA, p.a4)
	cfg := Config{JobPorts: []bpf.Port{{Proto: bpf.ProtoTCP, Number: uint16(job.Port)}}}
	e := startNode(t, p, cfg)
	dir := e.cfg.PinDir
	if err := e.SetKillSwitch(bpf.ModeHard); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := dialTCP(t, p.nsB, job, time.Second); err == nil {
		t.Error("new connection to the job port succeeded after Stop with the switch hard")
	}
	m, err := bpf.OpenPinned(dir)
	if err != nil {
		t.Fatalf("pins gone after Stop with the switch on: %v", err)
	}
	mode, err := m.KillSwitch()
	m.Close()
	if err != nil || mode != bpf.ModeHard {
		t.Fatalf("pinned mode after Stop = %v, %v; want hard", mode, err)
	}
	// A restarted agent on the same pins keeps the owner's mode.
	cfg.Node, cfg.Iface, cfg.PinDir, cfg.Capacity = "again", p.ifA, dir, 50e6
	cfg.Resolve = func(netip.Addr) (string, bool) { return "", false }
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in(t, p.nsA, func() { err = e2.Start(context.Background()) })
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e2.Stats(); err != nil || st.KillSwitch != "hard" {
		t.Errorf("restarted agent: kill-switch %q, %v; want the pinned hard", st.KillSwitch, err)
	}
	if err := e2.SetKillSwitch(bpf.ModeOff); err != nil {
		t.Fatal(err)
	}
	if _, err := dialTCP(t, p.nsB, job, 5*time.Second); err != nil {
		t.Errorf("new connection after switching off: %v", err)
	}
	if err := e2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := bpf.OpenPinned(dir); !errors.Is(err, bpf.ErrNotPinned) {
		t.Errorf("after Stop with the switch off, OpenPinned = %v, want ErrNotPinned", err)
	}
}

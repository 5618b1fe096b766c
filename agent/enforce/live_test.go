package enforce

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/internal/netnstest"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
)

// The node under test lives in namespace A (p.A4) and sends; the peer in
// namespace B (p.B4) is building "bldg-b".

// startNode starts an Enforcer on A's veth; it stops at test end.
func startNode(t *testing.T, p *netnstest.Pair, cfg Config) *Enforcer {
	t.Helper()
	cfg.Node = "n-" + p.NameA
	cfg.Iface = p.IfA
	cfg.PinDir = netnstest.BPFPinDir(t, "enf")
	if cfg.Capacity == 0 {
		cfg.Capacity = 50e6
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(a netip.Addr) (string, bool) {
			if a == p.B4 || a == p.B6 {
				return "bldg-b", true
			}
			return "", false
		}
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	netnstest.In(t, p.NsA, func() { err = e.Start(context.Background()) })
	if err != nil {
		netnstest.FailOrSkip(t, "start enforcement: %v", err)
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
	p := netnstest.NewPair(t)
	const capacity = 50e6
	var (
		pubMu  sync.Mutex
		latest []mesh.BuildingBandwidth
		pubs   int
	)
	bw := policy.BandwidthConfig{Capacity: capacity, HalfLife: 500 * time.Millisecond, Confidence: 0.9, Shortfall: 0.9}
	e := startNode(t, p, Config{Capacity: capacity, Bandwidth: &bw, PublishEvery: 200 * time.Millisecond,
		Publish: func(b []mesh.BuildingBandwidth) { pubMu.Lock(); latest, pubs = b, pubs+1; pubMu.Unlock() }})

	udpSink := netnstest.StartUDPSink(t, p.NsB, p.B4)
	tcpSink := netnstest.StartTCPSink(t, p.NsB, p.B4)
	udp := netnstest.StartUDPSender(t, p.NsA, p.A4, udpSink.Addr, 6e6)
	tcp := netnstest.StartTCPSender(t, p.NsA, p.A4, tcpSink.AddrPort(), 4e6)

	time.Sleep(1500 * time.Millisecond) // warm-up: three half-lives
	// Average the sampler's figure over 2 s next to what the senders wrote.
	u0, c0, t0 := udp.Sent.Load(), tcp.Sent.Load(), time.Now()
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
	sent := float64(udp.Sent.Load()-u0+tcp.Sent.Load()-c0) / secs
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
	p := netnstest.NewPair(t)
	e := startNode(t, p, Config{})
	sink := netnstest.StartUDPSink(t, p.NsB, p.B4)
	const offered = 15e6
	snd := netnstest.StartUDPSender(t, p.NsA, p.A4, sink.Addr, offered)
	sink.WaitReceiving(t, snd)

	free := netnstest.RateOver(&sink.Received, time.Second)
	const assigned = 2e6
	ceiling := policy.DefaultCeilingFactor * assigned // the bucket counts wire bytes: payload is ~4 % less
	if free < 2*ceiling {
		t.Fatalf("sender reached only %.2f MB/s unbound (wrote %d bytes, last error %v), need ≥ %.2f to test a %.2f MB/s ceiling (machine overloaded?)", free/1e6, snd.Sent.Load(), snd.Err.Load(), 2*ceiling/1e6, ceiling/1e6)
	}
	b := FlowBinding{LocalPort: snd.Local.Port(), Dst: sink.Addr,
		Decision: policy.FlowDecision{ID: "f1", Class: policy.ClassMigration, Rate: assigned}}
	if err := e.ApplyFlows([]FlowBinding{b}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the 256 KiB burst drains
	held := netnstest.RateOver(&sink.Received, 2*time.Second)
	tos := sink.TOS.Load()
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
	if fs.Rate != uint64(ceiling) || fs.Burst != policy.DefaultMinBurst {
		t.Errorf("kernel bucket %d B/s, burst %d; want %d, %d", fs.Rate, fs.Burst, uint64(ceiling), policy.DefaultMinBurst)
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
	restored := netnstest.RateOver(&sink.Received, time.Second)
	if restored < 3*ceiling {
		t.Errorf("unbound again the sender delivers %.2f MB/s, want ≥ %.2f (3 × the removed ceiling)", restored/1e6, 3*ceiling/1e6)
	}
	if tos := sink.TOS.Load(); tos&^3 != 0 {
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
	p := netnstest.NewPair(t)
	e := startNode(t, p, Config{})
	other, err := bpf.OpenPinned(e.cfg.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	dst := netip.AddrPortFrom(p.B4, 7948)
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
	p := netnstest.NewPair(t)
	serverTLS, clientTLS := netnstest.SelfSignedTLS(t)
	quicSrv := netnstest.StartQUICEcho(t, p.NsA, p.A4, serverTLS)
	job := netnstest.StartTCPEcho(t, p.NsA, p.A4)
	owner := netnstest.StartTCPEcho(t, p.NsA, p.A4) // the owner's own service: never touched
	e := startNode(t, p, Config{
		TransferPort: uint16(quicSrv.Addr.Port),
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
	established, err := netnstest.DialTCP(t, p.NsB, job, 5*time.Second)
	if err != nil {
		t.Fatalf("dial job before the switch: %v", err)
	}
	if err := netnstest.TCPEcho(established, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, _, err := netnstest.DialQUIC(t, p.NsB, p.B4, quicSrv.Addr, clientTLS, 5*time.Second)
	if err != nil {
		t.Fatalf("dial QUIC before the switch: %v", err)
	}
	if err := netnstest.QUICEcho(conn, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := e.SetKillSwitch(bpf.ModeSoft); err != nil {
		t.Fatal(err)
	}
	if _, err := netnstest.DialTCP(t, p.NsB, job, time.Second); err == nil {
		t.Error("new TCP connection to the job port succeeded in soft mode")
	}
	if _, _, err := netnstest.DialQUIC(t, p.NsB, p.B4, quicSrv.Addr, clientTLS, time.Second); err == nil {
		t.Error("new QUIC connection to the transfer port succeeded in soft mode")
	}
	if err := netnstest.TCPEcho(established, 5*time.Second); err != nil {
		t.Errorf("established TCP connection broken by soft mode: %v", err)
	}
	if err := netnstest.QUICEcho(conn, 5*time.Second); err != nil {
		t.Errorf("established QUIC connection broken by soft mode: %v", err)
	}
	if c, err := netnstest.DialTCP(t, p.NsB, owner, 5*time.Second); err != nil {
		t.Errorf("owner's unprotected port refused in soft mode: %v", err)
	} else if err := netnstest.TCPEcho(c, 5*time.Second); err != nil {
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
	if _, err := netnstest.DialTCP(t, p.NsB, job, 5*time.Second); err != nil {
		t.Errorf("new TCP connection after switching off: %v", err)
	}
	if _, _, err := netnstest.DialQUIC(t, p.NsB, p.B4, quicSrv.Addr, clientTLS, 5*time.Second); err != nil {
		t.Errorf("new QUIC connection after switching off: %v", err)
	}
}

// TestLiveStartErrors: a missing interface is named; a second Start is
// refused; the pins are gone after Stop.
func TestLiveStartErrors(t *testing.T) {
	netnstest.RequirePrivileged(t)
	e, err := New(Config{Node: "n", Iface: "rn-no-such-if", PinDir: netnstest.BPFPinDir(t, "enf"), Capacity: 1e6,
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
	p := netnstest.NewPair(t)
	e2 := startNode(t, p, Config{})
	var err2 error
	netnstest.In(t, p.NsA, func() { err2 = e2.Start(context.Background()) })
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
	p := netnstest.NewPair(t)
	job := netnstest.StartTCPEcho(t, p.NsA, p.A4)
	cfg := Config{JobPorts: []bpf.Port{{Proto: bpf.ProtoTCP, Number: uint16(job.Port)}}}
	e := startNode(t, p, cfg)
	dir := e.cfg.PinDir
	if err := e.SetKillSwitch(bpf.ModeHard); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := netnstest.DialTCP(t, p.NsB, job, time.Second); err == nil {
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
	cfg.Node, cfg.Iface, cfg.PinDir, cfg.Capacity = "again", p.IfA, dir, 50e6
	cfg.Resolve = func(netip.Addr) (string, bool) { return "", false }
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	netnstest.In(t, p.NsA, func() { err = e2.Start(context.Background()) })
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e2.Stats(); err != nil || st.KillSwitch != "hard" {
		t.Errorf("restarted agent: kill-switch %q, %v; want the pinned hard", st.KillSwitch, err)
	}
	if err := e2.SetKillSwitch(bpf.ModeOff); err != nil {
		t.Fatal(err)
	}
	if _, err := netnstest.DialTCP(t, p.NsB, job, 5*time.Second); err != nil {
		t.Errorf("new connection after switching off: %v", err)
	}
	if err := e2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := bpf.OpenPinned(dir); !errors.Is(err, bpf.ErrNotPinned) {
		t.Errorf("after Stop with the switch off, OpenPinned = %v, want ErrNotPinned", err)
	}
}

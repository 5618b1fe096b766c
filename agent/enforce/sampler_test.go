package enforce

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
)

func TestCounterDelta(t *testing.T) {
	prev := bpf.DestCounters{OtherBytes: 1000, OtherPackets: 10, MigrationBytes: 500, MigrationPackets: 5}
	for _, tc := range []struct {
		name         string
		cur          bpf.DestCounters
		seen         bool
		wantO, wantM uint64
	}{
		{"growth", bpf.DestCounters{OtherBytes: 1600, OtherPackets: 16, MigrationBytes: 900, MigrationPackets: 9}, true, 600, 400},
		{"unchanged", prev, true, 0, 0},
		{"new destination", bpf.DestCounters{OtherBytes: 300, OtherPackets: 3}, false, 300, 0},
		// Evicted and seen again: the entry restarted from zero, so all of
		// it is new, even the field that happens to be larger.
		{"reset other", bpf.DestCounters{OtherBytes: 200, OtherPackets: 2, MigrationBytes: 700, MigrationPackets: 7}, true, 200, 700},
		{"reset by packets", bpf.DestCounters{OtherBytes: 1200, OtherPackets: 4, MigrationBytes: 600, MigrationPackets: 6}, true, 1200, 600},
	} {
		o, m := counterDelta(prev, tc.cur, tc.seen)
		if o != tc.wantO || m != tc.wantM {
			t.Errorf("%s: delta = (other %d, migration %d), want (%d, %d)", tc.name, o, m, tc.wantO, tc.wantM)
		}
	}
}

var (
	addrA1 = netip.MustParseAddr("10.1.0.1")
	addrA2 = netip.MustParseAddr("10.1.0.2")
	addrB1 = netip.MustParseAddr("10.2.0.1")
	addrX  = netip.MustParseAddr("192.0.2.9") // outside the cluster
)

func testResolve(a netip.Addr) (string, bool) {
	switch a {
	case addrA1, addrA2:
		return "bldg-a", true
	case addrB1:
		return "bldg-b", true
	}
	return "", false
}

func testBW(capacity float64) policy.BandwidthConfig {
	return policy.BandwidthConfig{Capacity: capacity, HalfLife: time.Second, Confidence: 0.9, Shortfall: 0.9}
}

// feed runs n samples 100 ms apart; each destination's counters grow by
// its per-sample increment.
func feed(s *sampler, start time.Time, n int, inc map[netip.Addr]bpf.DestCounters, known []string) time.Time {
	cur := map[netip.Addr]bpf.DestCounters{}
	now := start
	for i := 0; i <= n; i++ {
		next := map[netip.Addr]bpf.DestCounters{}
		for a, d := range inc {
			c := cur[a]
			c.OtherBytes += d.OtherBytes
			c.OtherPackets += d.OtherPackets
			c.MigrationBytes += d.MigrationBytes
			c.MigrationPackets += d.MigrationPackets
			next[a] = c
		}
		cur = next
		s.observe(now, cur, known)
		now = now.Add(100 * time.Millisecond)
	}
	return now.Add(-100 * time.Millisecond)
}

func TestSamplerSharedAccessLink(t *testing.T) {
	const capacity = 100e6
	s := newSampler(testBW(capacity), testResolve, false)
	// Per 100 ms: 1 MB to building A (two hosts), 0.5 MB to B, 0.2 MB
	// outside, and 3 MB of migration to A that must not count.
	inc := map[netip.Addr]bpf.DestCounters{
		addrA1: {OtherBytes: 600e3, OtherPackets: 400, MigrationBytes: 3e6, MigrationPackets: 2000},
		addrA2: {OtherBytes: 400e3, OtherPackets: 300},
		addrB1: {OtherBytes: 500e3, OtherPackets: 350},
		addrX:  {OtherBytes: 200e3, OtherPackets: 150},
	}
	now := feed(s, time.Unix(1000, 0), 100, inc, []string{"bldg-c"})
	rates, total, at := s.snapshot()
	if !at.Equal(now) {
		t.Errorf("sampled at %v, want %v", at, now)
	}
	if want := 17e6; math.Abs(total-want) > 1 {
		t.Errorf("total non-migration = %.0f B/s, want %.0f", total, want)
	}
	want := map[string][2]float64{"bldg-a": {10e6, 30e6}, "bldg-b": {5e6, 0}, "bldg-c": {0, 0}, "": {2e6, 0}}
	if len(rates) != len(want) {
		t.Fatalf("rates for %d buildings, want %d: %+v", len(rates), len(want), rates)
	}
	if rates[len(rates)-1].Building != "" {
		t.Errorf("outside-cluster entry not last: %+v", rates)
	}
	for _, r := range rates {
		w := want[r.Building]
		if math.Abs(r.NonMigration-w[0]) > 1 || math.Abs(r.Migration-w[1]) > 1 {
			t.Errorf("building %q: non-migration %.0f, migration %.0f B/s, want %.0f, %.0f", r.Building, r.NonMigration, r.Migration, w[0], w[1])
		}
	}
	// Every building shares the access link: available = capacity − all
	// non-migration egress (17 MB/s), steady, so the bound is tight.
	bw := s.estimates(now)
	if len(bw) != 3 {
		t.Fatalf("published %d buildings, want 3 (a, b, c): %+v", len(bw), bw)
	}
	for i, b := range bw {
		if wantName := []string{"bldg-a", "bldg-b", "bldg-c"}[i]; b.Building != wantName {
			t.Errorf("entry %d is %q, want %q", i, b.Building, wantName)
		}
		if want := capacity - 17e6; math.Abs(b.Available-want) > 0.01*want || b.AvailableLow > b.Available || b.AvailableLow < 0.95*want {
			t.Errorf("%s: available %.0f (low %.0f), want %.0f", b.Building, b.Available, b.AvailableLow, want)
		}
	}
}

func TestSamplerPerBuilding(t *testing.T) {
	const capacity = 50e6
	s := newSampler(testBW(capacity), testResolve, true)
	inc := map[netip.Addr]bpf.DestCounters{
		addrA1: {OtherBytes: 1e6, OtherPackets: 700},
		addrB1: {OtherBytes: 2e6, OtherPackets: 1400},
	}
	now := feed(s, time.Unix(1000, 0), 100, inc, nil)
	got := map[string]float64{}
	for _, b := range s.estimates(now) {
		got[b.Building] = b.Available
	}
	for b, want := range map[string]float64{"bldg-a": capacity - 10e6, "bldg-b": capacity - 20e6} {
		if math.Abs(got[b]-want) > 0.01*want {
			t.Errorf("%s: available %.0f, want %.0f", b, got[b], want)
		}
	}
}

// The first reading is a baseline (bytes sent before the agent started
// are not a rate), and a destination that is evicted and comes back
// contributes only its new counter.
func TestSamplerBaselineAndReset(t *testing.T) {
	s := newSampler(testBW(100e6), testResolve, false)
	t0 := time.Unix(1000, 0)
	s.observe(t0, map[netip.Addr]bpf.DestCounters{addrA1: {OtherBytes: 50e9, OtherPackets: 1e6}}, nil)
	if rates, _, _ := s.snapshot(); len(rates) != 0 {
		t.Fatalf("baseline produced rates: %+v", rates)
	}
	s.observe(t0.Add(100*time.Millisecond), map[netip.Addr]bpf.DestCounters{addrA1: {OtherBytes: 50e9 + 1e6, OtherPackets: 1e6 + 700}}, nil)
	if _, total, _ := s.snapshot(); math.Abs(total-10e6) > 1 {
		t.Errorf("after growth: %.0f B/s, want 10e6", total)
	}
	// Evicted and seen again with 300 kB.
	s.observe(t0.Add(200*time.Millisecond), map[netip.Addr]bpf.DestCounters{addrA1: {OtherBytes: 300e3, OtherPackets: 200}}, nil)
	if _, total, _ := s.snapshot(); math.Abs(total-3e6) > 1 {
		t.Errorf("after reset: %.0f B/s, want 3e6 (the new counter, not a negative or huge delta)", total)
	}
	// A reading that is not later than the last one is ignored.
	s.observe(t0.Add(200*time.Millisecond), map[netip.Addr]bpf.DestCounters{addrA1: {OtherBytes: 90e9, OtherPackets: 2e6}}, nil)
	if _, total, _ := s.snapshot(); math.Abs(total-3e6) > 1 {
		t.Errorf("after a repeated timestamp: %.0f B/s, want 3e6 unchanged", total)
	}
}

func TestSamplerTransferShortfall(t *testing.T) {
	const capacity = 100e6
	s := newSampler(testBW(capacity), testResolve, false)
	now := feed(s, time.Unix(1000, 0), 50, map[netip.Addr]bpf.DestCounters{addrA1: {OtherBytes: 1e6, OtherPackets: 1}}, []string{"bldg-b"})
	s.observeTransfer(now, "bldg-b", 40e6, 10e6) // 30 MB/s short
	got := map[string]float64{}
	for _, b := range s.estimates(now) {
		got[b.Building] = b.Available
	}
	if want := capacity - 10e6; math.Abs(got["bldg-a"]-want) > 0.01*want {
		t.Errorf("bldg-a: available %.0f, want %.0f (no shortfall there)", got["bldg-a"], want)
	}
	if want := capacity - 10e6 - 30e6; math.Abs(got["bldg-b"]-want) > 0.01*want {
		t.Errorf("bldg-b: available %.0f, want %.0f (lowered by the 30 MB/s shortfall)", got["bldg-b"], want)
	}
}

func TestEstimatesCapped(t *testing.T) {
	s := newSampler(testBW(1e6), testResolve, false)
	var known []string
	for i := range mesh.MaxBandwidthEntries + 5 {
		known = append(known, "b"+string(rune('a'+i)))
	}
	s.observe(time.Unix(1, 0), nil, known)
	s.observe(time.Unix(2, 0), nil, known)
	if got := len(s.estimates(time.Unix(2, 0))); got != mesh.MaxBandwidthEntries {
		t.Errorf("published %d entries, want the cap %d", got, mesh.MaxBandwidthEntries)
	}
}

func TestBucketFloors(t *testing.T) {
	for _, tc := range []struct {
		d                   policy.FlowDecision
		wantRate, wantBurst uint64
		wantErr             bool
	}{
		{policy.FlowDecision{Rate: 10e6, Ceiling: 11e6, Burst: 1 << 20}, 11e6, 1 << 20, false},
		{policy.FlowDecision{Rate: 10e6, Ceiling: 10e6, Burst: 1000}, 11e6, policy.DefaultMinBurst, false}, // raised to the floors
		{policy.FlowDecision{Rate: 10e6}, 11e6, policy.DefaultMinBurst, false},
		{policy.FlowDecision{Rate: 10e6, Ceiling: 20e6}, 20e6, policy.DefaultMinBurst, false},
		{policy.FlowDecision{Rate: 1e30}, bpf.MaxRate, policy.DefaultMinBurst, false},
		{policy.FlowDecision{}, 0, 0, true},
		{policy.FlowDecision{Rate: -1}, 0, 0, true},
		{policy.FlowDecision{Rate: math.NaN()}, 0, 0, true},
	} {
		r, b, err := bucket(tc.d)
		if (err != nil) != tc.wantErr {
			t.Errorf("bucket(%+v) error = %v, want error %v", tc.d, err, tc.wantErr)
			continue
		}
		if r != tc.wantRate || b != tc.wantBurst {
			t.Errorf("bucket(rate %v, ceiling %v, burst %d) = %d, %d; want %d, %d", tc.d.Rate, tc.d.Ceiling, tc.d.Burst, r, b, tc.wantRate, tc.wantBurst)
		}
	}
}

func TestConfigRefusesControlPorts(t *testing.T) {
	base := Config{Node: "n1", Iface: "eth0", Capacity: 1e6, Resolve: testResolve, ControlPorts: []uint16{7946, 7947}}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"transfer on gossip", func(c *Config) { c.TransferPort = 7946 }, "control-plane"},
		{"job on raft", func(c *Config) { c.JobPorts = []bpf.Port{{Proto: bpf.ProtoTCP, Number: 7947}} }, "control-plane"},
		{"no iface", func(c *Config) { c.Iface = "" }, "interface"},
		{"no capacity", func(c *Config) { c.Capacity = 0 }, "capacity"},
		{"no resolver", func(c *Config) { c.Resolve = nil }, "resolver"},
	} {
		c := base
		tc.mod(&c)
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New error = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	ok := base
	ok.TransferPort = 7948
	e, err := New(ok)
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := e.cfg.checkPorts([]bpf.Port{{Proto: bpf.ProtoUDP, Number: 7946}}); err == nil {
		t.Error("ProtectJobPorts would accept the gossip port")
	}
}

// Enforcement off (--dev without root): everything runs, nothing is
// enforced, and the calls that need the kernel say so.
func TestOffMode(t *testing.T) {
	e, err := New(Config{Off: true, OffReason: "--dev without root"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("Start in off mode: %v", err)
	}
	if e.Enabled() {
		t.Error("Enabled() = true with enforcement off")
	}
	if err := e.SetKillSwitch(bpf.ModeSoft); !errors.Is(err, ErrOff) || !strings.Contains(err.Error(), "--dev without root") {
		t.Errorf("SetKillSwitch = %v, want ErrOff with the reason", err)
	}
	if err := e.ApplyFlows([]FlowBinding{{LocalPort: 1, Dst: netip.MustParseAddrPort("10.0.0.1:7948"), Decision: policy.FlowDecision{Rate: 1e6}}}); err != nil {
		t.Errorf("ApplyFlows in off mode = %v, want nil (accepted, nothing enforced)", err)
	}
	e.ObserveTransfer("bldg-a", 10, 1) // must not panic
	if bw := e.Bandwidth(); bw != nil {
		t.Errorf("Bandwidth() in off mode = %+v, want nil (nothing measured)", bw)
	}
	st, err := e.Stats()
	if err != nil || st.Enabled || st.OffReason != "--dev without root" {
		t.Errorf("Stats = %+v, %v; want disabled with the reason", st, err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func TestInterfaceFor(t *testing.T) {
	name, err := InterfaceFor(netip.MustParseAddr("127.0.0.1"))
	if err != nil || name != "lo" {
		t.Errorf("InterfaceFor(127.0.0.1) = %q, %v; want lo", name, err)
	}
	for _, a := range []string{"0.0.0.0", "192.0.2.77"} {
		if name, err := InterfaceFor(netip.MustParseAddr(a)); err == nil {
			t.Errorf("InterfaceFor(%s) = %q, want an error", a, name)
		}
	}
}

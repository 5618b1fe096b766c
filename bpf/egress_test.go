package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/cilium/ebpf"

	"github.com/reclaimnet/reclaimnet/policy"
)

func udpFrame(dst netip.Addr, sport, dport uint16, size int, ds uint8) frame {
	src := srcV4
	if dst.Is6() {
		src = srcV6
	}
	return frame{src: src, dst: dst, proto: 17, sport: sport, dport: dport, payload: make([]byte, size), ds: ds, flowLabel: 0xabcde}
}

func TestEgressDSCPKeepsECNAndChecksum(t *testing.T) {
	e := loadDetached(t)
	classes := []policy.TrafficClass{policy.ClassEmergency, policy.ClassMigration, policy.ClassPresync, policy.ClassNone}
	for _, dst := range []netip.Addr{dstV4, dstV6} {
		for i, class := range classes {
			sport := uint16(41000 + i)
			key := FlowKey{Proto: ProtoUDP, SrcPort: sport, Dst: netip.AddrPortFrom(dst, 7948)}
			if err := e.SetFlow(key, class, 1<<30, 1<<20); err != nil {
				t.Fatal(err)
			}
			// Start from DS fields with every ECN value and a DSCP that
			// must be overwritten (AF11 = 10) or 0.
			for _, ds := range []uint8{0x00, 0x01, 0x02, 0x03, 10<<2 | 0x01, 46<<2 | 0x03} {
				t.Run(fmt.Sprintf("%s/%s/ds=%#02x", dst, class, ds), func(t *testing.T) {
					in := udpFrame(dst, sport, 7948, 100, ds).bytes()
					got, out, err := e.egress.Test(in)
					if err != nil {
						t.Fatal(err)
					}
					if got != verdictPass {
						t.Fatalf("verdict %s, want pass", verdictName(got))
					}
					out = out[:len(in)]
					wantDS := class.DSCP()<<2 | ds&0x03
					if class == policy.ClassNone {
						wantDS = ds
					}
					var gotDS uint8
					if dst.Is4() {
						gotDS = out[15]
						if !ipv4HeaderValid(out) {
							t.Errorf("IPv4 header checksum invalid after rewrite: % x", out[14:34])
						}
					} else {
						w := binary.BigEndian.Uint32(out[14:])
						gotDS = uint8(w >> 20)
						if w>>28 != 6 || w&0xfffff != 0xabcde {
							t.Errorf("IPv6 version/flow label changed: %#08x", w)
						}
					}
					if gotDS != wantDS {
						t.Errorf("DS field %#02x (DSCP %d, ECN %d), want %#02x", gotDS, gotDS>>2, gotDS&3, wantDS)
					}
					// Only the DS field (and for IPv4 its checksum) may change.
					exp := append([]byte(nil), in...)
					if dst.Is4() {
						exp[15] = out[15]
						exp[24], exp[25] = out[24], out[25]
					} else {
						exp[14], exp[15] = out[14], out[15]
					}
					if string(exp) != string(out) {
						t.Errorf("bytes other than the DS field changed")
					}
				})
			}
		}
	}
}

func TestEgressUnknownFlowUntouchedAndCounted(t *testing.T) {
	e := loadDetached(t)
	key := FlowKey{Proto: ProtoUDP, SrcPort: 5000, Dst: netip.AddrPortFrom(dstV4, 7948)}
	if err := e.SetFlow(key, policy.ClassMigration, 1<<30, 1<<20); err != nil {
		t.Fatal(err)
	}
	flowPkt := udpFrame(dstV4, 5000, 7948, 200, 0).bytes()
	others := [][]byte{
		udpFrame(dstV4, 5001, 7948, 300, 0x01).bytes(),                                                        // other source port
		udpFrame(dstV4, 5000, 7949, 300, 0x01).bytes(),                                                        // other destination port
		frame{src: srcV4, dst: dstV4, proto: 6, sport: 5000, dport: 7948, tcpFlags: tcpACK, ds: 0x01}.bytes(), // TCP
	}
	for _, in := range others {
		got, out, err := e.egress.Test(in)
		if err != nil {
			t.Fatal(err)
		}
		if got != verdictPass || string(out[:len(in)]) != string(in) {
			t.Errorf("traffic outside the flow table: verdict %s, changed=%v; want pass, unchanged", verdictName(got), string(out[:len(in)]) != string(in))
		}
	}
	for range 3 {
		if _, _, err := e.egress.Test(flowPkt); err != nil {
			t.Fatal(err)
		}
	}
	v6 := udpFrame(dstV6, 5000, 7948, 100, 0).bytes()
	if _, _, err := e.egress.Test(v6); err != nil {
		t.Fatal(err)
	}
	counters, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	var otherBytes uint64
	for _, o := range others {
		otherBytes += uint64(len(o))
	}
	want := DestCounters{
		MigrationBytes: 3 * uint64(len(flowPkt)), MigrationPackets: 3,
		OtherBytes: otherBytes, OtherPackets: 3,
	}
	if got := counters[dstV4]; got != want {
		t.Errorf("counters for %s: %+v, want %+v", dstV4, got, want)
	}
	if got, want := counters[dstV6], (DestCounters{OtherBytes: uint64(len(v6)), OtherPackets: 1}); got != want {
		t.Errorf("counters for %s: %+v, want %+v", dstV6, got, want)
	}
	st, err := e.Flow(key)
	if err != nil {
		t.Fatal(err)
	}
	if st.PassedPackets != 3 || st.PassedBytes != 3*uint64(len(flowPkt)) || st.DroppedPackets != 0 {
		t.Errorf("flow stats %+v, want 3 packets / %d bytes passed, none dropped", st, 3*len(flowPkt))
	}
	if err := e.RemoveFlow(key); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Flow(key); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("flow after RemoveFlow: err %v, want ErrKeyNotExist", err)
	}
	if err := e.RemoveFlow(key); err != nil {
		t.Errorf("removing an absent flow: %v, want nil", err)
	}
}

// TestEgressBucketCeiling drains a bucket and checks the drops, then
// changes the ceiling and checks that tokens and counters are kept.
func TestEgressBucketCeiling(t *testing.T) {
	e := loadDetached(t)
	key := FlowKey{Proto: ProtoUDP, SrcPort: 6000, Dst: netip.AddrPortFrom(dstV6, 7948)}
	in := udpFrame(dstV6, 6000, 7948, 938, 0).bytes() // 1000 bytes on the wire
	if len(in) != 1000 {
		t.Fatalf("frame is %d bytes, want 1000", len(in))
	}
	// 1 byte/s: no measurable refill during the test.
	if err := e.SetFlow(key, policy.ClassPresync, 1, 3500); err != nil {
		t.Fatal(err)
	}
	var verdicts []string
	for range 6 {
		got, _, err := e.egress.Test(in)
		if err != nil {
			t.Fatal(err)
		}
		verdicts = append(verdicts, verdictName(got))
	}
	if want := "[pass pass pass drop drop drop]"; fmt.Sprint(verdicts) != want {
		t.Errorf("verdicts %v, want %s", verdicts, want)
	}
	st, err := e.Flow(key)
	if err != nil {
		t.Fatal(err)
	}
	if st.PassedPackets != 3 || st.DroppedPackets != 3 || st.DroppedBytes != 3000 || st.Tokens != 500 {
		t.Errorf("stats %+v, want 3 passed, 3 dropped (3000 bytes), 500 tokens left", st)
	}
	// Raising the rate keeps the tokens (capped at the new burst) and the
	// counters.
	if err := e.SetFlow(key, policy.ClassMigration, 2, 400); err != nil {
		t.Fatal(err)
	}
	st, err = e.Flow(key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tokens != 400 || st.PassedPackets != 3 || st.DroppedPackets != 3 || st.Rate != 2 || st.Class != policy.ClassMigration {
		t.Errorf("after SetFlow: %+v, want tokens 400, counters kept, rate 2, class migration", st)
	}
	all, err := e.FlowStats()
	if err != nil || len(all) != 1 || all[0].Key != key {
		t.Errorf("FlowStats = %+v, %v; want the one flow %s", all, err, key)
	}
	for _, bad := range []struct {
		rate, burst uint64
	}{{0, 1000}, {MaxRate + 1, 1000}, {1000, 0}, {1000, MaxBurst + 1}} {
		if err := e.SetFlow(key, policy.ClassMigration, bad.rate, bad.burst); err == nil {
			t.Errorf("SetFlow(rate %d, burst %d): nil error, want one", bad.rate, bad.burst)
		}
	}
	if err := e.SetFlow(FlowKey{Proto: ProtoUDP, SrcPort: 1, Dst: netip.AddrPortFrom(dstV4, 0)}, policy.ClassMigration, 1, 1); err == nil {
		t.Error("SetFlow with port 0: nil error, want one")
	}
}

// refillOracle is the bucket refill in plain Go with big-enough integers:
// tokens + min(elapsed, 2^40 ns) * rate / 1e9, capped at burst.
func refillOracle(tokens, burst, rate, elapsed uint64) uint64 {
	elapsed = min(elapsed, 1<<40)
	add := (elapsed/1e9)*rate + (elapsed%1e9)*rate/1e9
	if t := tokens + add; t >= tokens && t <= burst {
		return t
	}
	return burst
}

// TestEgressRefillFormula sets a bucket's last refill into the past and
// checks the tokens one packet later against the oracle, including
// elapsed times and rates that would overflow a naive product.
func TestEgressRefillFormula(t *testing.T) {
	e := loadDetached(t)
	in := udpFrame(dstV4, 6100, 7948, 946, 0).bytes()
	pkt := uint64(len(in))
	for i, c := range []struct {
		rate, burst, tokens uint64
		ago                 time.Duration
	}{
		{rate: 1e6, burst: 1 << 20, tokens: 0, ago: 10 * time.Millisecond},
		{rate: 1e6, burst: 1 << 20, tokens: 0, ago: 500 * time.Millisecond},
		{rate: 50e6, burst: 256 << 10, tokens: 100, ago: 3 * time.Millisecond},
		{rate: MaxRate, burst: MaxBurst, tokens: 0, ago: 900 * time.Millisecond},
		{rate: MaxRate, burst: MaxBurst, tokens: 0, ago: 10 * time.Minute}, // elapsed*rate overflows 64 bits
		{rate: MaxRate, burst: MaxBurst, tokens: 0, ago: 30 * time.Minute}, // elapsed capped at 2^40 ns
		{rate: 1000, burst: 1 << 30, tokens: 0, ago: 2 * time.Hour},
	} {
		t.Run(fmt.Sprintf("%d/rate=%d/ago=%s", i, c.rate, c.ago), func(t *testing.T) {
			key := FlowKey{Proto: ProtoUDP, SrcPort: 6100, Dst: netip.AddrPortFrom(dstV4, 7948)}
			if err := e.SetFlow(key, policy.ClassMigration, c.rate, c.burst); err != nil {
				t.Fatal(err)
			}
			set := monotonicNow()
			if set <= uint64(c.ago) {
				t.Skipf("the monotonic clock is at %s, below %s: cannot place a refill that far back", time.Duration(set), c.ago)
			}
			last := set - uint64(c.ago)
			v := reclaimnetFlowVal{Rate: c.rate, Burst: c.burst, Tokens: c.tokens, LastNs: last, Dscp: 34, Class: 2}
			if err := e.flows.Update(flowKey(key), &v, ebpf.UpdateLock); err != nil {
				t.Fatal(err)
			}
			got, _, err := e.egress.Test(in)
			done := monotonicNow()
			if err != nil {
				t.Fatal(err)
			}
			st, err := e.Flow(key)
			if err != nil {
				t.Fatal(err)
			}
			// The program ran at some instant in [set, done].
			lo := refillOracle(c.tokens, c.burst, c.rate, set-last)
			hi := refillOracle(c.tokens, c.burst, c.rate, done-last)
			switch {
			case lo >= pkt:
				if got != verdictPass {
					t.Fatalf("verdict %s with at least %d tokens, want pass", verdictName(got), lo)
				}
				lo, hi = lo-pkt, hi-pkt
			case got == verdictPass:
				if hi < pkt {
					t.Fatalf("passed with at most %d tokens for a %d-byte packet", hi, pkt)
				}
				lo, hi = 0, hi-pkt
			}
			if st.Tokens < lo || st.Tokens > hi {
				t.Errorf("tokens %d, want within [%d, %d]", st.Tokens, lo, hi)
			}
			if st.Tokens > c.burst {
				t.Errorf("tokens %d above burst %d", st.Tokens, c.burst)
			}
		})
	}
}

// TestEgressRefillOverTime drains a bucket and waits, by polling, for the
// kernel clock to refill it: a dropped packet passes again only after the
// time the rate needs to earn it.
func TestEgressRefillOverTime(t *testing.T) {
	e := loadDetached(t)
	key := FlowKey{Proto: ProtoUDP, SrcPort: 6200, Dst: netip.AddrPortFrom(dstV4, 7948)}
	in := udpFrame(dstV4, 6200, 7948, 946, 0).bytes() // 1000 bytes
	const rate = 4000                                 // bytes/s: one packet per 250 ms
	if err := e.SetFlow(key, policy.ClassMigration, rate, 2000); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got, _, _ := e.egress.Test(in); got != verdictPass {
			t.Fatalf("packet %d from a full bucket: %s, want pass", i, verdictName(got))
		}
	}
	drained := time.Now()
	st, _ := e.Flow(key)
	if got, _, _ := e.egress.Test(in); got != verdictDrop {
		t.Fatalf("packet from an empty bucket (tokens %d): %s, want drop", st.Tokens, verdictName(got))
	}
	wait.For(t, 5*time.Second, "the bucket refilled at 4000 bytes/s", func() bool {
		got, _, err := e.egress.Test(in)
		if err != nil {
			t.Fatal(err)
		}
		return got == verdictPass
	})
	waited := time.Since(drained)
	// 1000 bytes at 4000 bytes/s take 250 ms minus what was left (< 1000
	// bytes after two packets from 2000), so at least (1000-tokens)/rate.
	need := time.Duration(float64(1000-st.Tokens) / rate * float64(time.Second))
	if waited < need-5*time.Millisecond {
		t.Errorf("packet passed again after %s, want at least %s", waited, need)
	}
	st, _ = e.Flow(key)
	if st.DroppedPackets == 0 || st.PassedPackets != 3 {
		t.Errorf("stats %+v, want 3 passed and some dropped", st)
	}
}

// TestEgressCountsWireLength runs the program with a context whose
// wire_len is that of a GSO super-packet (headers of every segment): the
// bucket and the counters must charge that, as the qdisc layer does.
func TestEgressCountsWireLength(t *testing.T) {
	e := loadDetached(t)
	key := FlowKey{Proto: ProtoUDP, SrcPort: 6300, Dst: netip.AddrPortFrom(dstV4, 7948)}
	in := udpFrame(dstV4, 6300, 7948, 958, 0).bytes() // 1000 bytes
	if err := e.SetFlow(key, policy.ClassMigration, 1, 5000); err != nil {
		t.Fatal(err)
	}
	ctx := make([]byte, 192)                       // struct __sk_buff
	binary.LittleEndian.PutUint32(ctx[160:], 3000) // wire_len
	binary.LittleEndian.PutUint32(ctx[164:], 3)    // gso_segs
	var verdicts []string
	for range 2 {
		got, err := e.egress.Run(&ebpf.RunOptions{Data: in, Context: ctx})
		if err != nil {
			t.Fatal(err)
		}
		verdicts = append(verdicts, verdictName(got))
	}
	if want := "[pass drop]"; fmt.Sprint(verdicts) != want {
		t.Errorf("verdicts %v, want %s (5000-byte bucket, 3000 wire bytes each)", verdicts, want)
	}
	st, err := e.Flow(key)
	if err != nil {
		t.Fatal(err)
	}
	if st.PassedBytes != 3000 || st.DroppedBytes != 3000 || st.Tokens != 2000 {
		t.Errorf("stats %+v, want 3000 bytes passed, 3000 dropped, 2000 tokens", st)
	}
	c, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if got := c[dstV4].MigrationBytes; got != 3000 {
		t.Errorf("migration bytes %d, want 3000", got)
	}
}

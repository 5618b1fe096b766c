package bpf

// Benchmarks for BENCHMARKS.md (root; not run in CI):
//
//	go test ./bpf -run XXX -bench 'Program' -benchtime 2000000x
//	go test ./bpf -run XXX -bench 'KillSwitchLatency' -benchtime 1000x -timeout 20m
//	go test ./bpf -run XXX -bench 'EgressThroughput' -benchtime 1x
//
// The latency benchmarks treat one b.N iteration as one trial and report
// percentiles; each trial flips the switch while attempts arrive
// continuously.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/reclaimnet/reclaimnet/internal/netnstest"
	"github.com/reclaimnet/reclaimnet/policy"
)

func BenchmarkIngressProgram(b *testing.B) {
	e := loadDetached(b)
	if err := e.ProtectPorts(Port{ProtoTCP, protTCP}, Port{ProtoUDP, protUDP}); err != nil {
		b.Fatal(err)
	}
	tcp := func(dst netip.Addr, dport uint16, flags uint8) []byte {
		src := srcV4
		if dst.Is6() {
			src = srcV6
		}
		return frame{src: src, dst: dst, proto: 6, sport: 40000, dport: dport, tcpFlags: flags}.bytes()
	}
	udp := func(dst netip.Addr, dport uint16, payload []byte) []byte {
		src := srcV4
		if dst.Is6() {
			src = srcV6
		}
		return frame{src: src, dst: dst, proto: 17, sport: 40000, dport: dport, payload: payload}.bytes()
	}
	for _, c := range []struct {
		name string
		mode Mode
		in   []byte
	}{
		{"off/ipv4-syn", ModeOff, tcp(dstV4, protTCP, tcpSYN)},
		{"soft/ipv4-syn-protected-drop", ModeSoft, tcp(dstV4, protTCP, tcpSYN)},
		{"soft/ipv4-ack-protected-pass", ModeSoft, tcp(dstV4, protTCP, tcpACK)},
		{"soft/ipv4-syn-other-port", ModeSoft, tcp(dstV4, openTCP, tcpSYN)},
		{"soft/ipv6-quic-initial-drop", ModeSoft, udp(dstV6, protUDP, quicLong(quicV1, 0, 1200))},
		{"soft/ipv6-quic-short-pass", ModeSoft, udp(dstV6, protUDP, quicShort(1200))},
		{"hard/ipv4-ack-protected-drop", ModeHard, tcp(dstV4, protTCP, tcpACK)},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := e.SetKillSwitch(c.mode); err != nil {
				b.Fatal(err)
			}
			_, per, err := e.ingress.Benchmark(c.in, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}

func BenchmarkEgressProgram(b *testing.B) {
	e := loadDetached(b)
	hit := FlowKey{Proto: ProtoUDP, SrcPort: 40000, Dst: netip.AddrPortFrom(dstV4, protUDP)}
	if err := e.SetFlow(hit, policy.ClassMigration, MaxRate, MaxBurst); err != nil {
		b.Fatal(err)
	}
	hit6 := FlowKey{Proto: ProtoUDP, SrcPort: 40000, Dst: netip.AddrPortFrom(dstV6, protUDP)}
	if err := e.SetFlow(hit6, policy.ClassMigration, MaxRate, MaxBurst); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		in   []byte
	}{
		// The same skb is reused across repeats, so the DS field is
		// rewritten on the first run only; later runs find it set.
		{"ipv4-flow-hit", udpFrame(dstV4, 40000, protUDP, 1200, 0).bytes()},
		{"ipv6-flow-hit", udpFrame(dstV6, 40000, protUDP, 1200, 0).bytes()},
		{"ipv4-not-in-table", udpFrame(dstV4, 40001, protUDP, 1200, 0).bytes()},
		{"ipv4-tcp-not-in-table", frame{src: srcV4, dst: dstV4, proto: 6, sport: 1, dport: 2, tcpFlags: tcpACK}.bytes()},
	} {
		b.Run(c.name, func(b *testing.B) {
			_, per, err := e.egress.Benchmark(c.in, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}

// attemptStream sends QUIC-v1-Initial-shaped datagrams from A to B's
// protected port as fast as it can (each one a new connection attempt)
// and records when B's socket last received one.
type attemptStream struct {
	port     int
	lastRecv atomic.Int64 // CLOCK_MONOTONIC ns of the last datagram B read
	stop     func()
}

func startAttempts(b *testing.B, p *netnstest.Pair) *attemptStream {
	var (
		rx, tx *net.UDPConn
		err    error
	)
	netnstest.In(b, p.NsB, func() { rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.B4, 0))) })
	if err != nil {
		b.Fatal(err)
	}
	s := &attemptStream{port: rx.LocalAddr().(*net.UDPAddr).Port}
	netnstest.In(b, p.NsA, func() { tx, err = net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr)) })
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			if _, err := rx.Read(buf); err != nil {
				return
			}
			s.lastRecv.Store(int64(monotonicNow()))
		}
	})
	wg.Go(func() {
		pkt := quicLong(quicV1, 0, 1200)
		for ctx.Err() == nil {
			tx.Write(pkt)
		}
	})
	s.stop = func() { cancel(); rx.Close(); tx.Close(); wg.Wait() }
	b.Cleanup(s.stop)
	return s
}

// armTrial sets the switch off, clears the first-drop timestamp and
// waits until attempts are flowing through the program again.
func armTrial(b *testing.B, m *Maps) {
	if err := m.SetKillSwitch(ModeOff); err != nil {
		b.Fatal(err)
	}
	if err := m.resetFirstDrop(); err != nil {
		b.Fatal(err)
	}
	s0, err := m.KillSwitchStats()
	if err != nil {
		b.Fatal(err)
	}
	wait.ForEvery(b, 0, 5*time.Second, "attempts reaching the ingress program", func() bool {
		s, err := m.KillSwitchStats()
		if err != nil {
			b.Fatal(err)
		}
		return s.Seen >= s0.Seen+3
	})
}

// waitFirstDrop polls, without pause (seen is a measured time), for the
// program's first-drop timestamp.
func waitFirstDrop(b *testing.B, m *Maps) (first, seen uint64) {
	wait.ForEvery(b, 0, 5*time.Second, "a drop after switching", func() bool {
		var err error
		if first, err = m.firstDrop(); err != nil {
			b.Fatal(err)
		}
		seen = monotonicNow()
		return first != 0
	})
	return first, seen
}

type latencies []float64 // µs

func (l latencies) report(b *testing.B, prefix string) {
	if len(l) == 0 {
		return
	}
	b.ReportMetric(float64(len(l)), prefix+"-trials")
	s := slices.Clone(l)
	slices.Sort(s)
	q := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	b.ReportMetric(q(0.5), prefix+"-p50-µs")
	b.ReportMetric(q(0.99), prefix+"-p99-µs")
	b.ReportMetric(s[len(s)-1], prefix+"-max-µs")
}

// BenchmarkKillSwitchLatency measures (a) map update returned → first
// attempt dropped, by the program's own timestamp of its first drop, and
// the moment a polling reader sees it; and (b) start of the
// `reclaimnet killswitch hard` process → first attempt dropped. The
// baseline is the same owner's view with `tc filter add ... action drop`
// (a u32 rule, as iptables/nft are not installed here), measured by the
// last datagram B's socket received.
func BenchmarkKillSwitchLatency(b *testing.B) {
	p := netnstest.NewPair(b)
	pinDir := netnstest.BPFPinDir(b, "t")
	var (
		e   *Enforcer
		err error
	)
	netnstest.In(b, p.NsB, func() { e, err = Open(Config{Iface: p.IfB, PinDir: pinDir, Attach: AttachTCX, NoEgress: true}) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	s := startAttempts(b, p)
	if err := e.ProtectPorts(Port{ProtoUDP, uint16(s.port)}); err != nil {
		b.Fatal(err)
	}
	for _, m := range []Mode{ModeSoft, ModeHard} {
		b.Run("map-update/"+m.String(), func(b *testing.B) {
			var enforced, observed latencies
			st0, _ := e.KillSwitchStats()
			t0 := time.Now()
			for range b.N {
				armTrial(b, e.Maps)
				if err := e.SetKillSwitch(m); err != nil {
					b.Fatal(err)
				}
				returned := monotonicNow()
				first, seen := waitFirstDrop(b, e.Maps)
				enforced = append(enforced, (float64(first)-float64(returned))/1e3)
				observed = append(observed, float64(seen-returned)/1e3)
			}
			st1, _ := e.KillSwitchStats()
			enforced.report(b, "enforced")
			observed.report(b, "seen")
			b.ReportMetric(float64(st1.Seen-st0.Seen)/time.Since(t0).Seconds()/1e3, "kattempts/s")
		})
	}
	// RECLAIMNET_BIN names a prebuilt binary (for a machine without Go).
	bin := os.Getenv("RECLAIMNET_BIN")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "reclaimnet")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/reclaimnet/reclaimnet").CombinedOutput(); err != nil {
			b.Fatalf("build reclaimnet: %v: %s", err, out)
		}
	}
	b.Run("command/reclaimnet-killswitch-hard", func(b *testing.B) {
		var enforced, process latencies
		for range b.N {
			armTrial(b, e.Maps)
			start := monotonicNow()
			out, err := exec.Command(bin, "killswitch", "hard", "--pin-dir", pinDir).CombinedOutput()
			exited := monotonicNow()
			if err != nil {
				b.Fatalf("killswitch hard: %v: %s", err, out)
			}
			first, _ := waitFirstDrop(b, e.Maps)
			enforced = append(enforced, (float64(first)-float64(start))/1e3)
			process = append(process, float64(exited-start)/1e3)
		}
		enforced.report(b, "enforced")
		process.report(b, "process")
	})
	// Baseline: a tc u32 drop rule inserted by a process, on the same
	// interface and traffic (the BPF switch stays off, so the program
	// passes every attempt on to tc).
	for _, tool := range []string{"iptables", "nft"} {
		if _, err := exec.LookPath(tool); err == nil {
			b.Logf("%s is installed but not benchmarked here", tool)
		} else {
			b.Logf("%s not installed: baseline is tc u32", tool)
		}
	}
	b.Run("baseline/tc-filter-add-drop", func(b *testing.B) {
		for _, tool := range []string{"tc", "ip"} {
			if _, err := exec.LookPath(tool); err != nil {
				b.Skipf("%s not installed: no tc baseline", tool)
			}
		}
		if err := e.SetKillSwitch(ModeOff); err != nil {
			b.Fatal(err)
		}
		netnstest.Run(b, "tc", "-n", p.NameB, "qdisc", "replace", "dev", p.IfB, "clsact")
		// This kernel has no act_gact ("action drop"); redirecting to a
		// veth that is down drops the packet just the same.
		sink := "rnk" + netnstest.RandomSuffix(b)
		netnstest.Run(b, "ip", "-n", p.NameB, "link", "add", sink, "type", "veth", "peer", "name", sink+"p")
		var enforced latencies
		// Each trial waits for 20 ms of silence: at most 300 trials.
		for range min(b.N, 300) {
			armTrial(b, e.Maps)
			start := monotonicNow()
			out, err := exec.Command("tc", "-n", p.NameB, "filter", "add", "dev", p.IfB, "ingress", "prio", "1", "handle", "800::1",
				"protocol", "ip", "u32", "match", "ip", "dport", strconv.Itoa(s.port), "0xffff", "action", "mirred", "egress", "redirect", "dev", sink).CombinedOutput()
			if err != nil {
				b.Fatalf("tc filter add: %v: %s", err, out)
			}
			// The rule holds once B's socket stops receiving: wait for a
			// 20 ms silence, then take the last arrival.
			for {
				last := s.lastRecv.Load()
				time.Sleep(20 * time.Millisecond)
				if s.lastRecv.Load() == last {
					enforced = append(enforced, (float64(last)-float64(start))/1e3)
					break
				}
			}
			if out, err := exec.Command("tc", "-n", p.NameB, "filter", "del", "dev", p.IfB, "ingress").CombinedOutput(); err != nil {
				b.Fatalf("tc filter del: %v: %s", err, out)
			}
		}
		enforced.report(b, "enforced")
	})
}

// BenchmarkEgressThroughput runs one TCP flow (Go sender and receiver,
// 256 KiB writes) from A to B over the veth with and without the egress
// program attached to A's side, alternating in one run. With the
// program, the flow is in the flow table (AF41, a ceiling far above the
// link), so every packet takes the full path: parse, lookup, bucket,
// DSCP, counters.
func BenchmarkEgressThroughput(b *testing.B) {
	p := netnstest.NewPair(b)
	const dur = 4 * time.Second
	var ln net.Listener
	var err error
	netnstest.In(b, p.NsB, func() { ln, err = net.Listen("tcp", netip.AddrPortFrom(p.B4, 0).String()) })
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	run := func(cport int) float64 {
		var c net.Conn
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: p.A4.AsSlice(), Port: cport}}
		netnstest.In(b, p.NsA, func() { c, err = d.Dial("tcp", dst.String()) })
		if err != nil {
			b.Fatal(err)
		}
		srv, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		var got atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			buf := make([]byte, 256<<10)
			for {
				n, err := srv.Read(buf)
				got.Add(int64(n))
				if err != nil {
					return
				}
			}
		})
		buf := make([]byte, 256<<10)
		start := time.Now()
		for time.Since(start) < dur {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		n := got.Load()
		secs := time.Since(start).Seconds()
		c.Close()
		srv.Close()
		wg.Wait()
		return float64(n) * 8 / secs / 1e9
	}
	var with, without []float64
	for round := range 3 {
		without = append(without, run(41000+round))
		var e *Enforcer
		netnstest.In(b, p.NsA, func() {
			e, err = Open(Config{Iface: p.IfA, PinDir: netnstest.BPFPinDir(b, "t"), Attach: AttachTCX, NoIngress: true})
		})
		if err != nil {
			b.Fatal(err)
		}
		cport := 42000 + round
		key := FlowKey{Proto: ProtoTCP, SrcPort: uint16(cport), Dst: dst}
		if err := e.SetFlow(key, policy.ClassMigration, MaxRate, MaxBurst); err != nil {
			b.Fatal(err)
		}
		with = append(with, run(cport))
		fs, err := e.Flow(key)
		if err != nil || fs.PassedPackets == 0 {
			b.Fatalf("the flow did not go through the flow table: %+v, %v", fs, err)
		}
		e.Close()
	}
	mean := func(v []float64) float64 {
		var s float64
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	b.ReportMetric(mean(without), "Gbit/s-without")
	b.ReportMetric(mean(with), "Gbit/s-with")
	b.ReportMetric(100*(1-mean(with)/mean(without)), "%-cost")
	fmt.Fprintf(os.Stderr, "TCP rounds without %.2f with %.2f Gbit/s\n", without, with)
}

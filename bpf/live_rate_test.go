package bpf

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/reclaimnet/reclaimnet/internal/netnstest"
	"github.com/reclaimnet/reclaimnet/policy"
)

// TestLivePacedQUICUnderCeiling sends a QUIC stream paced at R through
// a BPF ceiling of 1.1·R with a 512 KiB burst (docs/design.md P3.5): the flow must
// keep its rate with next to no drops, and its bytes must be counted as
// migration traffic towards the receiver.
func TestLivePacedQUICUnderCeiling(t *testing.T) {
	p := netnstest.NewPair(t)
	e := openIn(t, p, "A", Config{Iface: p.IfA, NoIngress: true})
	serverTLS, clientTLS := netnstest.SelfSignedTLS(t)
	srv := netnstest.StartQUICSink(t, p.NsB, p.B4, serverTLS)
	conn, udp, err := netnstest.DialQUIC(t, p.NsA, p.A4, srv.Addr, clientTLS, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	const (
		pace    = 5e6 // bytes/s the sender paces at (40 Mbit/s)
		ceiling = 1.1 * pace
		burst   = 512 << 10
		chunk   = 16 << 10
	)
	key := FlowKey{Proto: ProtoUDP, SrcPort: uint16(udp.LocalAddr().(*net.UDPAddr).Port), Dst: srv.Addr.AddrPort()}
	key.Dst = netip.AddrPortFrom(key.Dst.Addr().Unmap(), key.Dst.Port())
	if err := e.SetFlow(key, policy.ClassMigration, ceiling, burst); err != nil {
		t.Fatal(err)
	}
	st, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); st.CancelWrite(0); wg.Wait() }()
	var sendErr atomic.Value
	wg.Go(func() {
		// A pacer that may catch up 128 KiB after a stall (the machine is
		// shared); the BPF burst absorbs that.
		lim := rate.NewLimiter(pace, 128<<10)
		buf := make([]byte, chunk)
		for {
			if err := lim.WaitN(ctx, chunk); err != nil {
				return
			}
			if _, err := st.Write(buf); err != nil {
				if ctx.Err() == nil {
					sendErr.Store(err)
				}
				return
			}
		}
	})
	// Measure after a warm-up so the initial burst does not count.
	time.Sleep(500 * time.Millisecond)
	b0, t0 := srv.Received.Load(), time.Now()
	time.Sleep(3 * time.Second)
	b1, t1 := srv.Received.Load(), time.Now()
	got := float64(b1-b0) / t1.Sub(t0).Seconds()
	if err, _ := sendErr.Load().(error); err != nil {
		t.Fatalf("sender failed: %v", err)
	}
	fs, err := e.Flow(key) // read before the counters, which only grow
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("goodput %.2f MB/s (paced at %.2f, ceiling %.2f); flow %d packets passed, %d dropped", got/1e6, pace/1e6, ceiling/1e6, fs.PassedPackets, fs.DroppedPackets)
	// The lower bound is generous (CI runs packages in parallel on 2 cores);
	// a policer without pacing collapses QUIC to a few % of the rate.
	if got < 0.7*pace || got > 1.05*ceiling {
		t.Errorf("goodput %.2f MB/s, want within [0.7·%.1f, 1.05·%.1f] MB/s", got/1e6, pace/1e6, ceiling/1e6)
	}
	if limit := max(3, fs.PassedPackets/200); fs.DroppedPackets > limit {
		t.Errorf("%d packets dropped at the ceiling, want at most %d (0.5 %% of %d)", fs.DroppedPackets, limit, fs.PassedPackets)
	}
	counters, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c := counters[p.B4]; c.MigrationBytes < uint64(b1) || c.MigrationBytes < fs.PassedBytes {
		t.Errorf("migration bytes to %s = %d, want ≥ %d received and ≥ %d passed by the flow", p.B4, c.MigrationBytes, b1, fs.PassedBytes)
	}
}

// TestLiveIsolation is docs/design.md P3.6 (Theorem 4) on a real link: a link
// shaped to B = 200 Mbit/s with Bmin = 60 Mbit/s leaves migration
// Bmig = B − max(0.3·B, Bmin) = 140 Mbit/s. Seven migration flows with
// ceilings summing to Bmig, each offering 30 % more than its ceiling,
// compete with a research TCP flow, which must average at least 0.9·Bmin
// over 5 s.
func TestLiveIsolation(t *testing.T) {
	p := netnstest.NewPair(t)
	const (
		linkRate = 200e6 / 8 // bytes/s
		bmin     = 60e6 / 8
		flows    = 7
		payload  = 1200
		wire     = payload + 8 + 20 + 14 // UDP, IPv4, Ethernet: what the bucket counts
	)
	bres := max(0.3*linkRate, bmin)
	bmig := linkRate - bres
	ceiling := bmig / flows
	// The link: a token-bucket filter at 200 Mbit/s with a 256 KiB burst
	// (10 ms at that rate). With HTB's default burst (~27 KB) a lone TCP
	// flow only reached ~97 % of the rate on this veth; TBF, 99 %.
	// (tc qdisc add dev IF root tbf rate 200mbit burst 256kb latency 20ms)
	netnstest.ShapeTBF(t, p.NsA, p.IfA, linkRate, 256<<10, 20*time.Millisecond)
	var err error
	e := openIn(t, p, "A", Config{Iface: p.IfA, NoIngress: true})

	// Receivers in B: one UDP socket for the migration flows, one TCP sink.
	var udpSink *net.UDPConn
	var tcpLn net.Listener
	netnstest.In(t, p.NsB, func() {
		if udpSink, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.B4, 0))); err != nil {
			return
		}
		tcpLn, err = net.Listen("tcp", netip.AddrPortFrom(p.B4, 0).String())
	})
	if err != nil {
		t.Fatal(err)
	}
	var tcpBytes atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu    sync.Mutex
		socks []net.Conn // guarded by mu; closed at the end to stop readers and writers
	)
	track := func(c net.Conn) {
		mu.Lock()
		socks = append(socks, c)
		mu.Unlock()
	}
	track(udpSink)
	defer func() {
		cancel()
		tcpLn.Close()
		mu.Lock()
		for _, c := range socks {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	// Nobody reads the migration sink: its datagrams are dropped at the
	// full socket buffer, which costs the shared CPUs less than reading
	// them. Migration traffic is measured where it leaves the ceilings.
	wg.Go(func() {
		c, err := tcpLn.Accept()
		if err != nil {
			return
		}
		track(c)
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			tcpBytes.Add(int64(n))
			if err != nil {
				return
			}
		}
	})

	// Seven migration senders in A, each from its own socket.
	dst := udpSink.LocalAddr().(*net.UDPAddr).AddrPort()
	for range flows {
		var s *net.UDPConn
		netnstest.In(t, p.NsA, func() { s, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst)) })
		if err != nil {
			t.Fatal(err)
		}
		track(s)
		key := FlowKey{Proto: ProtoUDP, SrcPort: uint16(s.LocalAddr().(*net.UDPAddr).Port), Dst: netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())}
		if err := e.SetFlow(key, policy.ClassMigration, uint64(ceiling), 256<<10); err != nil {
			t.Fatal(err)
		}
		// UDP GSO, as quic-go uses: one write of 16 datagrams is one
		// super-packet at TC egress, charged at its wire length.
		if err := setUDPSegment(s, payload); err != nil {
			netnstest.FailOrSkip(t, "UDP_SEGMENT: %v", err)
		}
		wg.Go(func() {
			const batch = 16
			lim := rate.NewLimiter(rate.Limit(1.3*ceiling/wire), 4*batch)
			buf := make([]byte, batch*payload)
			for lim.WaitN(ctx, batch) == nil {
				s.Write(buf) // drops at the ceiling are silent for UDP
			}
		})
	}
	// The research flow: TCP as fast as it can.
	var research net.Conn
	netnstest.In(t, p.NsA, func() { research, err = net.Dial("tcp", tcpLn.Addr().String()) })
	if err != nil {
		t.Fatal(err)
	}
	track(research)
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for ctx.Err() == nil {
			if _, err := research.Write(buf); err != nil {
				return
			}
		}
	})

	passed := func() int64 {
		stats, err := e.FlowStats()
		if err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for _, s := range stats {
			sum += s.PassedBytes
		}
		return int64(sum)
	}
	time.Sleep(time.Second) // warm-up: TCP slow start, the buckets' initial bursts
	tcp0, mig0, t0 := tcpBytes.Load(), passed(), time.Now()
	time.Sleep(5 * time.Second)
	tcp1, mig1, t1 := tcpBytes.Load(), passed(), time.Now()
	secs := t1.Sub(t0).Seconds()
	// The bound is checked on the research flow's goodput (bytes its
	// receiver read), the strictest measure; its rate on the wire (each
	// MSS of payload is an MTU-sized frame plus 14 bytes of Ethernet, the
	// unit of B, Bmin and the ceilings) is logged beside it.
	mss, err := tcpMSS(research)
	if err != nil {
		t.Fatal(err)
	}
	tcpGoodput := float64(tcp1-tcp0) / secs
	tcpRate := tcpGoodput * float64(1500+14) / float64(mss)
	migRate := float64(mig1-mig0) / secs // wire bytes that passed the ceilings

	stats, err := e.FlowStats()
	if err != nil {
		t.Fatal(err)
	}
	var dropped uint64
	for _, s := range stats {
		dropped += s.DroppedPackets
	}
	t.Logf("research TCP %.1f Mbit/s on the wire, %.1f goodput (need ≥ %.1f); migration %.1f Mbit/s on the wire (Bmig %.1f); %d packets over the ceilings dropped",
		tcpRate*8/1e6, tcpGoodput*8/1e6, 0.9*bmin*8/1e6, migRate*8/1e6, bmig*8/1e6, dropped)
	if tcpGoodput < 0.9*bmin {
		t.Errorf("research flow averaged %.1f Mbit/s of goodput, want ≥ 0.9·Bmin = %.1f Mbit/s", tcpGoodput*8/1e6, 0.9*bmin*8/1e6)
	}
	if migRate > 1.03*bmig {
		t.Errorf("migration flows took %.1f Mbit/s, want ≤ Bmig = %.1f Mbit/s (+3 %%)", migRate*8/1e6, bmig*8/1e6)
	}
	if dropped == 0 {
		t.Error("no packets dropped although every flow offered 30 % over its ceiling: the ceilings did not act")
	}
}

func setUDPSegment(c *net.UDPConn, size int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
	}); err != nil {
		return err
	}
	return serr
}

// tcpMSS is the payload of a full segment on c (TCP_MAXSEG).
func tcpMSS(c net.Conn) (int, error) {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		mss  int
		serr error
	)
	if err := raw.Control(func(fd uintptr) { mss, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG) }); err != nil {
		return 0, err
	}
	if serr == nil && (mss < 500 || mss > 1460) {
		serr = fmt.Errorf("TCP_MAXSEG %d outside what a 1500-byte MTU allows", mss)
	}
	return mss, serr
}

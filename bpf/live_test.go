package bpf

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/netnstest"
)

// openIn opens an enforcer inside ns on iface and closes it at test end.
func openIn(t *testing.T, p *netnstest.Pair, ns string, cfg Config) *Enforcer {
	t.Helper()
	handle := p.NsA
	if ns == "B" {
		handle = p.NsB
	}
	if cfg.PinDir == "" {
		cfg.PinDir = netnstest.BPFPinDir(t, "t")
	}
	var (
		e   *Enforcer
		err error
	)
	netnstest.In(t, handle, func() { e, err = Open(cfg) })
	if err != nil {
		netnstest.FailOrSkip(t, "open enforcer on %s: %v", cfg.Iface, err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close enforcer: %v", err)
		}
	})
	return e
}

// TestLiveKillSwitch attaches the ingress program to node B's veth and
// checks, with real TCP and QUIC connections from A, that soft mode
// refuses new connections to protected ports while established ones
// keep working, that hard mode stops all traffic to protected ports, and
// that other ports are never touched. Both attach paths are exercised.
func TestLiveKillSwitch(t *testing.T) {
	netnstest.RequirePrivileged(t)
	for _, attach := range []AttachMode{AttachTCX, AttachCLS} {
		for _, v6 := range []bool{false, true} {
			name := fmt.Sprintf("%s/ipv4", attach)
			if v6 {
				name = fmt.Sprintf("%s/ipv6", attach)
			}
			t.Run(name, func(t *testing.T) { testLiveKillSwitch(t, attach, v6) })
		}
	}
}

func testLiveKillSwitch(t *testing.T, attach AttachMode, v6 bool) {
	p := netnstest.NewPair(t)
	a, b := p.A4, p.B4
	if v6 {
		a, b = p.A6, p.B6
	}
	e := openIn(t, p, "B", Config{Iface: p.IfB, Attach: attach, NoEgress: true})
	if got := e.Attached()["ingress"]; got != attach {
		t.Fatalf("ingress attached via %s, want %s", got, attach)
	}
	serverTLS, clientTLS := netnstest.SelfSignedTLS(t)
	tcpProt := netnstest.StartTCPEcho(t, p.NsB, b)
	tcpOpen := netnstest.StartTCPEcho(t, p.NsB, b)
	quicProt := netnstest.StartQUICEcho(t, p.NsB, b, serverTLS)
	quicOpen := netnstest.StartQUICEcho(t, p.NsB, b, serverTLS)
	if err := e.ProtectPorts(Port{ProtoTCP, uint16(tcpProt.Port)}, Port{ProtoUDP, uint16(quicProt.Addr.Port)}); err != nil {
		t.Fatal(err)
	}
	const ok, refused = true, false
	const fail = 700 * time.Millisecond // how long a refused attempt is given
	const echo = 3 * time.Second        // generous: the machine may be loaded

	// Established before the switch flips.
	estTCP, err := netnstest.DialTCP(t, p.NsA, tcpProt, echo)
	if err != nil {
		t.Fatalf("dial protected TCP with the switch off: %v", err)
	}
	estQUIC, _, err := netnstest.DialQUIC(t, p.NsA, a, quicProt.Addr, clientTLS, echo)
	if err != nil {
		t.Fatalf("dial protected QUIC with the switch off: %v", err)
	}
	estOpenTCP, err := netnstest.DialTCP(t, p.NsA, tcpOpen, echo)
	if err != nil {
		t.Fatal(err)
	}

	newTCP := func(to *net.TCPAddr, want bool) {
		t.Helper()
		timeout := echo
		if !want {
			timeout = fail
		}
		c, err := netnstest.DialTCP(t, p.NsA, to, timeout)
		if err == nil {
			err = netnstest.TCPEcho(c, timeout)
		}
		if got := err == nil; got != want {
			t.Errorf("new TCP connection to :%d: connected=%v (%v), want %v", to.Port, got, err, want)
		}
	}
	newQUIC := func(to *net.UDPAddr, want bool) {
		t.Helper()
		timeout := echo
		if !want {
			timeout = fail
		}
		c, _, err := netnstest.DialQUIC(t, p.NsA, a, to, clientTLS, timeout)
		if err == nil {
			err = netnstest.QUICEcho(c, timeout)
		}
		if got := err == nil; got != want {
			t.Errorf("new QUIC connection to :%d: connected=%v (%v), want %v", to.Port, got, err, want)
		}
	}
	established := func(what string, f func(time.Duration) error, want bool) {
		t.Helper()
		timeout := echo
		if !want {
			timeout = fail
		}
		err := f(timeout)
		if got := err == nil; got != want {
			t.Errorf("established %s: echo=%v (%v), want %v", what, got, err, want)
		}
	}
	estTCPEcho := func(d time.Duration) error { return netnstest.TCPEcho(estTCP, d) }
	estQUICEcho := func(d time.Duration) error { return netnstest.QUICEcho(estQUIC, d) }
	estOpenEcho := func(d time.Duration) error { return netnstest.TCPEcho(estOpenTCP, d) }

	// Soft: no new connections to protected ports; everything else works.
	if err := e.SetKillSwitch(ModeSoft); err != nil {
		t.Fatal(err)
	}
	newTCP(tcpProt, refused)
	newQUIC(quicProt.Addr, refused)
	newTCP(tcpOpen, ok)
	newQUIC(quicOpen.Addr, ok)
	established("TCP to protected port (soft)", estTCPEcho, ok)
	established("QUIC to protected port (soft)", estQUICEcho, ok)
	st, err := e.KillSwitchStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.DroppedSYN == 0 || st.DroppedQUIC == 0 || st.DroppedHard != 0 {
		t.Errorf("soft-mode counters %+v, want SYN and QUIC drops and no hard drops", st)
	}

	// Hard: nothing reaches protected ports; other ports still work.
	if err := e.SetKillSwitch(ModeHard); err != nil {
		t.Fatal(err)
	}
	established("TCP to protected port (hard)", estTCPEcho, refused)
	established("QUIC to protected port (hard)", estQUICEcho, refused)
	newTCP(tcpProt, refused)
	newTCP(tcpOpen, ok)
	newQUIC(quicOpen.Addr, ok)
	established("TCP to open port (hard)", estOpenEcho, ok)
	if st, _ := e.KillSwitchStats(); st.DroppedHard == 0 {
		t.Errorf("hard-mode counters %+v, want hard drops", st)
	}

	// Off: new connections to protected ports work again.
	if err := e.SetKillSwitch(ModeOff); err != nil {
		t.Fatal(err)
	}
	newTCP(tcpProt, ok)
	newQUIC(quicProt.Addr, ok)

	// Close detaches: a refused port is reachable with the maps in hard.
	if err := e.SetKillSwitch(ModeHard); err != nil {
		t.Fatal(err)
	}
	newTCP(tcpProt, refused)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	newTCP(tcpProt, ok)
	if _, err := os.Stat(e.PinDir()); !os.IsNotExist(err) {
		t.Errorf("pin directory after Close: %v, want it gone", err)
	}
}

// TestLivePinnedSwitchOutlivesAgent flips the switch through OpenPinned
// from "another process" after the enforcer's own handles are gone,
// which is what `reclaimnet killswitch` does when the agent is hung.
func TestLivePinnedSwitchOutlivesAgent(t *testing.T) {
	p := netnstest.NewPair(t)
	pinDir := netnstest.BPFPinDir(t, "t")
	e := openIn(t, p, "B", Config{Iface: p.IfB, PinDir: pinDir, Attach: AttachTCX, NoEgress: true})
	tcpProt := netnstest.StartTCPEcho(t, p.NsB, p.B4)
	if err := e.ProtectPorts(Port{ProtoTCP, uint16(tcpProt.Port)}); err != nil {
		t.Fatal(err)
	}
	// Simulate a dead agent: drop every handle it holds without detaching.
	e.mu.Lock()
	links := e.links
	e.links = nil
	e.mu.Unlock()
	for _, l := range links {
		l.Close() // the pin keeps the link (and the program) alive
	}
	e.closeObjects()

	// Resolve the neighbour first (switch still off): on a loaded machine
	// ARP can outlast the short dial below, and then no SYN is ever sent.
	if _, err := netnstest.DialTCP(t, p.NsA, tcpProt, 5*time.Second); err != nil {
		t.Fatalf("warm-up connection with the switch off: %v", err)
	}

	m, err := OpenPinned(pinDir)
	if err != nil {
		t.Fatalf("open pinned maps: %v", err)
	}
	defer m.Close()
	if err := m.SetKillSwitch(ModeSoft); err != nil {
		t.Fatal(err)
	}
	if c, err := netnstest.DialTCP(t, p.NsA, tcpProt, 700*time.Millisecond); err == nil {
		t.Errorf("new TCP connection through a pinned soft switch: connected to %s, want refused", c.RemoteAddr())
	}
	if st, _ := m.KillSwitchStats(); st.DroppedSYN == 0 {
		t.Errorf("counters %+v, want SYN drops", st)
	}
	if err := m.SetKillSwitch(ModeOff); err != nil {
		t.Fatal(err)
	}
	if _, err := netnstest.DialTCP(t, p.NsA, tcpProt, 2*time.Second); err != nil {
		t.Errorf("new TCP connection with the pinned switch off: %v", err)
	}
	// A restarted agent takes over the pinned maps and link, keeping the
	// owner's mode.
	if err := m.SetKillSwitch(ModeHard); err != nil {
		t.Fatal(err)
	}
	e2 := openIn(t, p, "B", Config{Iface: p.IfB, PinDir: pinDir, Attach: AttachTCX, NoEgress: true})
	if mode, _ := e2.KillSwitch(); mode != ModeHard {
		t.Errorf("mode after agent restart = %s, want hard", mode)
	}
	if _, err := netnstest.DialTCP(t, p.NsA, tcpProt, 700*time.Millisecond); err == nil {
		t.Error("new TCP connection after restart in hard mode: connected, want refused")
	}
	if _, err := OpenPinned(t.TempDir()); err == nil {
		t.Error("OpenPinned on a non-bpffs directory: nil error, want ErrNoBPFFS")
	}
	if _, err := OpenPinned(pinDir + "-absent"); err == nil {
		t.Error("OpenPinned on an empty directory: nil error, want ErrNotPinned")
	}
}

package bpf

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// openIn opens an enforcer inside ns on iface and closes it at test end.
func openIn(t *testing.T, p *netPair, ns string, cfg Config) *Enforcer {
	t.Helper()
	handle := p.nsA
	if ns == "B" {
		handle = p.nsB
	}
	if cfg.PinDir == "" {
		cfg.PinDir = testPinDir(t)
	}
	var (
		e   *Enforcer
		err error
	)
	in(t, handle, func() { e, err = Open(cfg) })
	if err != nil {
		failOrSkip(t, "open enforcer on %s: %v", cfg.Iface, err)
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
	requirePrivileged(t)
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
	p := newNetPair(t)
	a, b := p.a4, p.b4
	if v6 {
		a, b = p.a6, p.b6
	}
	e := openIn(t, p, "B", Config{Iface: p.ifB, Attach: attach, NoEgress: true})
	if got := e.Attached()["ingress"]; got != attach {
		t.Fatalf("ingress attached via %s, want %s", got, attach)
	}
	serverTLS, clientTLS := selfSignedTLS(t)
	tcpProt := startTCPEcho(t, p.nsB, b)
	tcpOpen := startTCPEcho(t, p.nsB, b)
	quicProt := startQUICServer(t, p.nsB, b, serverTLS, false)
	quicOpen := startQUICServer(t, p.nsB, b, serverTLS, false)
	if err := e.ProtectPorts(Port{ProtoTCP, uint16(tcpProt.Port)}, Port{ProtoUDP, uint16(quicProt.addr.Port)}); err != nil {
		t.Fatal(err)
	}
	const ok, refused = true, false
	const fail = 700 * time.Millisecond // how long a refused attempt is given
	const echo = 3 * time.Second        // generous: the machine may be loaded

	// Established before the switch flips.
	estTCP, err := dialTCP(t, p.nsA, tcpProt, echo)
	if err != nil {
		t.Fatalf("dial protected TCP with the switch off: %v", err)
	}
	estQUIC, _, err := dialQUIC(t, p.nsA, a, quicProt.addr, clientTLS, echo)
	if err != nil {
		t.Fatalf("dial protected QUIC with the switch off: %v", err)
	}
	estOpenTCP, err := dialTCP(t, p.nsA, tcpOpen, echo)
	if err != nil {
		t.Fatal(err)
	}

	newTCP := func(to *net.TCPAddr, want bool) {
		t.Helper()
		timeout := echo
		if !want {
			timeout = fail
		}
		c, err := dialTCP(t, p.nsA, to, timeout)
		if err == nil {
			err = tcpEcho(c, timeout)
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
		c, _, err := dialQUIC(t, p.nsA, a, to, clientTLS, timeout)
		if err == nil {
			err = quicEcho(c, timeout)
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
	estTCPEcho := func(d time.Duration) error { return tcpEcho(estTCP, d) }
	estQUICEcho := func(d time.Duration) error { return quicEcho(estQUIC, d) }
	estOpenEcho := func(d time.Duration) error { return tcpEcho(estOpenTCP, d) }

	// Soft: no new connections to protected ports; everything else works.
	if err := e.SetKillSwitch(ModeSoft); err != nil {
		t.Fatal(err)
	}
	newTCP(tcpProt, refused)
	newQUIC(quicProt.addr, refused)
	newTCP(tcpOpen, ok)
	newQUIC(quicOpen.addr, ok)
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
	newQUIC(quicOpen.addr, ok)
	established("TCP to open port (hard)", estOpenEcho, ok)
	if st, _ := e.KillSwitchStats(); st.DroppedHard == 0 {
		t.Errorf("hard-mode counters %+v, want hard drops", st)
	}

	// Off: new connections to protected ports work again.
	if err := e.SetKillSwitch(ModeOff); err != nil {
		t.Fatal(err)
	}
	newTCP(tcpProt, ok)
	newQUIC(quicProt.addr, ok)

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
	p := newNetPair(t)
	pinDir := testPinDir(t)
	e := openIn(t, p, "B", Config{Iface: p.ifB, PinDir: pinDir, Attach: AttachTCX, NoEgress: true})
	tcpProt := startTCPEcho(t, p.nsB, p.b4)
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

	m, err := OpenPinned(pinDir)
	if err != nil {
		t.Fatalf("open pinned maps: %v", err)
	}
	defer m.Close()
	if err := m.SetKillSwitch(ModeSoft); err != nil {
		t.Fatal(err)
	}
	if c, err := dialTCP(t, p.nsA, tcpProt, 700*time.Millisecond); err == nil {
		t.Errorf("new TCP connection through a pinned soft switch: connected to %s, want refused", c.RemoteAddr())
	}
	if st, _ := m.KillSwitchStats(); st.DroppedSYN == 0 {
		t.Errorf("counters %+v, want SYN drops", st)
	}
	if err := m.SetKillSwitch(ModeOff); err != nil {
		t.Fatal(err)
	}
	if _, err := dialTCP(t, p.nsA, tcpProt, 2*time.Second); err != nil {
		t.Errorf("new TCP connection with the pinned switch off: %v", err)
	}
	// A restarted agent takes over the pinned maps and link, keeping the
	// owner's mode.
	if err := m.SetKillSwitch(ModeHard); err != nil {
		t.Fatal(err)
	}
	e2 := openIn(t, p, "B", Config{Iface: p.ifB, PinDir: pinDir, Attach: AttachTCX, NoEgress: true})
	if mode, _ := e2.KillSwitch(); mode != ModeHard {
		t.Errorf("mode after agent restart = %s, want hard", mode)
	}
	if _, err := dialTCP(t, p.nsA, tcpProt, 700*time.Millisecond); err == nil {
		t.Error("new TCP connection after restart in hard mode: connected, want refused")
	}
	if _, err := OpenPinned(t.TempDir()); err == nil {
		t.Error("OpenPinned on a non-bpffs directory: nil error, want ErrNoBPFFS")
	}
	if _, err := OpenPinned(pinDir + "-absent"); err == nil {
		t.Error("OpenPinned on an empty directory: nil error, want ErrNotPinned")
	}
}

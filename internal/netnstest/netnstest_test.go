package netnstest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
)

const ciRuleChildEnv = "RECLAIMNET_NETNSTEST_CI_CHILD"

// TestFailOrSkipChild is run only as a child of TestFailOrSkipFollowsCI.
func TestFailOrSkipChild(t *testing.T) {
	if os.Getenv(ciRuleChildEnv) != "1" {
		t.Skip("run by TestFailOrSkipFollowsCI")
	}
	FailOrSkip(t, "no such capability")
	t.Log("FailOrSkip returned")
}

// TestFailOrSkipFollowsCI checks the project's rule for privileged tests
// that cannot run: with CI=true they fail, elsewhere they skip.
func TestFailOrSkipFollowsCI(t *testing.T) {
	for _, c := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{"true", true, "--- FAIL: TestFailOrSkipChild"},
		{"", false, "--- SKIP: TestFailOrSkipChild"},
		{"1", false, "--- SKIP: TestFailOrSkipChild"}, // only "true" means CI
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFailOrSkipChild$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), ciRuleChildEnv+"=1", "CI="+c.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.wantFail || !strings.Contains(string(out), c.want) {
			t.Errorf("CI=%q: child failed=%v (%v), want %v with %q in:\n%s", c.ci, failed, err, c.wantFail, c.want, out)
		}
		if strings.Contains(string(out), "FailOrSkip returned") {
			t.Errorf("CI=%q: the test went on after FailOrSkip:\n%s", c.ci, out)
		}
	}
}

// TestPairCarriesTraffic sends over a fresh Pair with every kind of
// sender and receiver, both address families.
func TestPairCarriesTraffic(t *testing.T) {
	p := NewPair(t)
	for _, v6 := range []bool{false, true} {
		a, b := p.A4, p.B4
		if v6 {
			a, b = p.A6, p.B6
		}
		echo := StartTCPEcho(t, p.NsB, b)
		c, err := DialTCP(t, p.NsA, echo, 5*time.Second)
		if err != nil {
			t.Fatalf("TCP %s → %s: %v", a, echo, err)
		}
		if err := TCPEcho(c, 5*time.Second); err != nil {
			t.Errorf("TCP echo over %s: %v", echo, err)
		}
		serverTLS, clientTLS := SelfSignedTLS(t)
		srv := StartQUICEcho(t, p.NsB, b, serverTLS)
		conn, _, err := DialQUIC(t, p.NsA, a, srv.Addr, clientTLS, 5*time.Second)
		if err != nil {
			t.Fatalf("QUIC %s → %s: %v", a, srv.Addr, err)
		}
		if err := QUICEcho(conn, 5*time.Second); err != nil {
			t.Errorf("QUIC echo over %s: %v", srv.Addr, err)
		}
	}
	// Paced senders deliver into the sinks; nothing on the veth marks the
	// datagrams, so the TOS byte read back is 0.
	udpSink := StartUDPSink(t, p.NsB, p.B4)
	udp := StartUDPSender(t, p.NsA, p.A4, udpSink.Addr, 1e6)
	udpSink.WaitReceiving(t, udp)
	tcpSink := StartTCPSink(t, p.NsB, p.B4)
	tcp := StartTCPSender(t, p.NsA, p.A4, tcpSink.AddrPort(), 1e6)
	wait.For(t, 5*time.Second, "the TCP sender writing", func() bool { return tcp.Sent.Load() > 0 })
	if tos := udpSink.TOS.Load(); tos != 0 {
		t.Errorf("TOS of an unmarked datagram = %#x, want 0", tos)
	}
	if udp.Local.Addr() != p.A4 || tcp.Local.Addr() != p.A4 {
		t.Errorf("senders bound to %s and %s, want %s", udp.Local, tcp.Local, p.A4)
	}
}

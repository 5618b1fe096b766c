package bpf

import (
	"fmt"
	"net/netip"
	"testing"
)

const (
	protTCP   = 7000 // protected TCP port (a job's service)
	protUDP   = 7948 // protected UDP port (the transfer listener)
	openTCP   = 22   // the owner's SSH: never touched
	openUDP   = 53
	quicV1    = 0x00000001
	quicV2    = 0x6b3343cf
	quicDraft = 0xff00001d
)

// ingressCase is one crafted packet and the verdict per mode.
type ingressCase struct {
	name string
	fr   frame
	cut  int // if > 0, truncate the frame to this many bytes
	mut  func(b []byte)
	soft uint32
	hard uint32
}

func ingressCases(src, dst netip.Addr) []ingressCase {
	tcp := func(dport uint16, flags uint8) frame {
		return frame{src: src, dst: dst, proto: 6, sport: 40000, dport: dport, tcpFlags: flags}
	}
	udp := func(dport uint16, payload []byte) frame {
		return frame{src: src, dst: dst, proto: 17, sport: 40001, dport: dport, payload: payload}
	}
	withFrag := func(f frame, off uint16, more bool) frame { f.fragOffset, f.moreFrags = off, more; return f }
	ipHdr := 20
	if dst.Is6() {
		ipHdr = 40
	}
	cases := []ingressCase{
		{name: "SYN to protected", fr: tcp(protTCP, tcpSYN), soft: verdictDrop, hard: verdictDrop},
		{name: "SYN-ACK to protected", fr: tcp(protTCP, tcpSYN|tcpACK), soft: verdictPass, hard: verdictDrop},
		{name: "ACK to protected", fr: tcp(protTCP, tcpACK), soft: verdictPass, hard: verdictDrop},
		{name: "PSH-ACK to protected", fr: tcp(protTCP, tcpPSH|tcpACK), soft: verdictPass, hard: verdictDrop},
		{name: "RST to protected", fr: tcp(protTCP, tcpRST), soft: verdictPass, hard: verdictDrop},
		{name: "SYN to ssh", fr: tcp(openTCP, tcpSYN), soft: verdictPass, hard: verdictPass},
		{name: "ACK to ssh", fr: tcp(openTCP, tcpACK), soft: verdictPass, hard: verdictPass},
		{name: "SYN to protected UDP port number over TCP", fr: tcp(protUDP, tcpSYN), soft: verdictPass, hard: verdictPass},
		{name: "QUIC v1 Initial", fr: udp(protUDP, quicLong(quicV1, 0, 1200)), soft: verdictDrop, hard: verdictDrop},
		{name: "QUIC v1 0-RTT", fr: udp(protUDP, quicLong(quicV1, 1, 1200)), soft: verdictPass, hard: verdictDrop},
		{name: "QUIC v1 Handshake", fr: udp(protUDP, quicLong(quicV1, 2, 300)), soft: verdictPass, hard: verdictDrop},
		{name: "QUIC v1 Retry", fr: udp(protUDP, quicLong(quicV1, 3, 100)), soft: verdictPass, hard: verdictDrop},
		{name: "QUIC v2 Initial", fr: udp(protUDP, quicLong(quicV2, 1, 1200)), soft: verdictDrop, hard: verdictDrop},
		{name: "QUIC v2 type 0 (0-RTT)", fr: udp(protUDP, quicLong(quicV2, 0, 1200)), soft: verdictPass, hard: verdictDrop},
		{name: "QUIC v2 Handshake", fr: udp(protUDP, quicLong(quicV2, 2, 300)), soft: verdictPass, hard: verdictDrop},
		{name: "QUIC draft-29 Initial", fr: udp(protUDP, quicLong(quicDraft, 0, 1200)), soft: verdictPass, hard: verdictDrop},
		{name: "QUIC version negotiation", fr: udp(protUDP, quicLong(0, 0, 100)), soft: verdictPass, hard: verdictDrop},
		{name: "QUIC short header", fr: udp(protUDP, quicShort(1200)), soft: verdictPass, hard: verdictDrop},
		{name: "QUIC v1 Initial to open UDP port", fr: udp(openUDP, quicLong(quicV1, 0, 1200)), soft: verdictPass, hard: verdictPass},
		{name: "QUIC Initial to protected TCP port number over UDP", fr: udp(protTCP, quicLong(quicV1, 0, 1200)), soft: verdictPass, hard: verdictPass},
		{name: "UDP payload truncated to 3 bytes", fr: udp(protUDP, []byte{0xc0, 0, 0}), soft: verdictPass, hard: verdictDrop},
		{name: "UDP empty payload", fr: udp(protUDP, nil), soft: verdictPass, hard: verdictDrop},
		{name: "TCP header cut after ports", fr: tcp(protTCP, tcpSYN), cut: 14 + ipHdr + 4, soft: verdictPass, hard: verdictDrop},
		{name: "TCP header cut inside ports", fr: tcp(protTCP, tcpSYN), cut: 14 + ipHdr + 3, soft: verdictPass, hard: verdictPass},
		// BPF_PROG_TEST_RUN refuses frames whose IP header is shorter than
		// its fixed part, so truncation is tested past it: a header that
		// claims more than the packet holds, and a wrong version field.
		{name: "IP header claims more than the packet", fr: tcp(protTCP, tcpSYN), cut: 14 + ipHdr + 4, mut: func(b []byte) {
			if b[14]>>4 == 4 {
				b[14] = 0x4f // IHL 15: 60 bytes of header
			} else {
				b[14+6] = 60 // destination options ...
				b[14+40] = 6 // ... of 8*(1+255) bytes
				b[14+41] = 255
			}
		}, soft: verdictPass, hard: verdictPass},
		{name: "wrong IP version", fr: tcp(protTCP, tcpSYN), mut: func(b []byte) { b[14] = 0x55 }, soft: verdictPass, hard: verdictPass},
		{name: "first fragment SYN", fr: withFrag(tcp(protTCP, tcpSYN), 0, true), soft: verdictPass, hard: verdictDrop},
		{name: "first fragment QUIC Initial", fr: withFrag(udp(protUDP, quicLong(quicV1, 0, 1200)), 0, true), soft: verdictPass, hard: verdictDrop},
		{name: "later fragment", fr: withFrag(tcp(protTCP, tcpSYN), 100, true), soft: verdictPass, hard: verdictPass},
		{name: "last fragment", fr: withFrag(udp(protUDP, quicLong(quicV1, 0, 1200)), 100, false), soft: verdictPass, hard: verdictPass},
		{name: "not IP (ARP)", fr: func() frame { f := tcp(protTCP, tcpSYN); t := uint16(0x0806); f.ethType = &t; return f }(), soft: verdictPass, hard: verdictPass},
		{name: "ICMP", fr: frame{src: src, dst: dst, proto: 1, payload: make([]byte, 32)}, soft: verdictPass, hard: verdictPass},
	}
	if dst.Is4() {
		opts := tcp(protTCP, tcpSYN)
		opts.ipOptions = 8
		cases = append(cases,
			ingressCase{name: "SYN with IPv4 options", fr: opts, soft: verdictDrop, hard: verdictDrop},
			ingressCase{name: "IPv4 options cut", fr: opts, cut: 14 + 24, soft: verdictPass, hard: verdictPass},
		)
	} else {
		dstOpts := tcp(protTCP, tcpSYN)
		dstOpts.v6DstOpts = true
		quicOpts := udp(protUDP, quicLong(quicV2, 1, 1200))
		quicOpts.v6DstOpts = true
		cases = append(cases,
			ingressCase{name: "SYN behind destination options", fr: dstOpts, soft: verdictDrop, hard: verdictDrop},
			ingressCase{name: "QUIC v2 Initial behind destination options", fr: quicOpts, soft: verdictDrop, hard: verdictDrop},
			ingressCase{name: "destination options cut", fr: dstOpts, cut: 14 + 40 + 1, soft: verdictPass, hard: verdictPass},
		)
	}
	return cases
}

func TestKillSwitchVerdicts(t *testing.T) {
	e := loadDetached(t)
	if err := e.ProtectPorts(Port{ProtoTCP, protTCP}, Port{ProtoUDP, protUDP}); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []struct {
		name     string
		src, dst netip.Addr
	}{{"ipv4", srcV4, dstV4}, {"ipv6", srcV6, dstV6}} {
		for _, c := range ingressCases(fam.src, fam.dst) {
			in := c.fr.bytes()
			if c.cut > 0 {
				in = in[:c.cut]
			}
			if c.mut != nil {
				c.mut(in)
			}
			for _, m := range []struct {
				mode Mode
				want uint32
			}{{ModeOff, verdictPass}, {ModeSoft, c.soft}, {ModeHard, c.hard}} {
				t.Run(fmt.Sprintf("%s/%s/%s", fam.name, m.mode, c.name), func(t *testing.T) {
					if err := e.SetKillSwitch(m.mode); err != nil {
						t.Fatal(err)
					}
					got, out, err := e.ingress.Test(in)
					if err != nil {
						t.Fatalf("test run: %v", err)
					}
					if got != m.want {
						t.Errorf("verdict %s (%#x), want %s", verdictName(got), got, verdictName(m.want))
					}
					if string(out[:len(in)]) != string(in) {
						t.Errorf("ingress program changed the packet")
					}
				})
			}
		}
	}
}

// TestKillSwitchCounters checks that each drop lands in its own counter
// and that the first-drop timestamp is set.
func TestKillSwitchCounters(t *testing.T) {
	e := loadDetached(t)
	if err := e.ProtectPorts(Port{ProtoTCP, protTCP}, Port{ProtoUDP, protUDP}); err != nil {
		t.Fatal(err)
	}
	syn := frame{src: srcV4, dst: dstV4, proto: 6, sport: 1, dport: protTCP, tcpFlags: tcpSYN}.bytes()
	initial := frame{src: srcV6, dst: dstV6, proto: 17, sport: 1, dport: protUDP, payload: quicLong(quicV1, 0, 1200)}.bytes()
	short := frame{src: srcV6, dst: dstV6, proto: 17, sport: 1, dport: protUDP, payload: quicShort(100)}.bytes()
	frag := frame{src: srcV4, dst: dstV4, proto: 6, sport: 1, dport: protTCP, tcpFlags: tcpSYN, moreFrags: true}.bytes()
	run := func(in []byte, n int) {
		t.Helper()
		for range n {
			if _, _, err := e.ingress.Test(in); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.SetKillSwitch(ModeSoft); err != nil {
		t.Fatal(err)
	}
	if first, err := e.firstDrop(); err != nil || first != 0 {
		t.Fatalf("first drop before any drop = %d, %v; want 0", first, err)
	}
	before := monotonicNow()
	run(syn, 3)
	run(initial, 2)
	run(short, 4)
	run(frag, 1)
	if err := e.SetKillSwitch(ModeHard); err != nil {
		t.Fatal(err)
	}
	run(short, 5)
	after := monotonicNow()
	got, err := e.KillSwitchStats()
	if err != nil {
		t.Fatal(err)
	}
	want := KillSwitchStats{Seen: 15, DroppedSYN: 3, DroppedQUIC: 2, DroppedHard: 5, PassProtected: 4, PassUnparsed: 1}
	if got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	first, err := e.firstDrop()
	if err != nil {
		t.Fatal(err)
	}
	if first < before || first > after {
		t.Errorf("first drop at %d, want within [%d, %d]", first, before, after)
	}
	if err := e.resetFirstDrop(); err != nil {
		t.Fatal(err)
	}
	if first, _ := e.firstDrop(); first != 0 {
		t.Errorf("first drop after reset = %d, want 0", first)
	}
	if got2, _ := e.KillSwitchStats(); got2 != want {
		t.Errorf("reset changed counters: %+v, want %+v", got2, want)
	}
}

func TestProtectedPortsRoundTrip(t *testing.T) {
	e := loadDetached(t)
	ports := []Port{{ProtoTCP, 8080}, {ProtoUDP, 7948}, {ProtoTCP, 7948}}
	if err := e.ProtectPorts(ports...); err != nil {
		t.Fatal(err)
	}
	if err := e.UnprotectPorts(Port{ProtoTCP, 7948}, Port{ProtoTCP, 9999}); err != nil {
		t.Fatal(err)
	}
	got, err := e.ProtectedPorts()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[Port]bool{}
	for _, p := range got {
		seen[p] = true
	}
	if len(got) != 2 || !seen[Port{ProtoTCP, 8080}] || !seen[Port{ProtoUDP, 7948}] {
		t.Errorf("protected ports %v, want [8080/tcp 7948/udp]", got)
	}
	if err := e.ProtectPorts(Port{Proto: 1, Number: 5}); err == nil {
		t.Error("protecting an ICMP port: got nil error, want one")
	}
	if err := e.SetKillSwitch(Mode(7)); err == nil {
		t.Error("mode 7: got nil error, want one")
	}
	if m, _ := e.KillSwitch(); m != ModeOff {
		t.Errorf("mode after rejected update = %s, want off", m)
	}
}

func TestParsePortAndMode(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Port
		ok   bool
	}{
		{"7948/udp", Port{ProtoUDP, 7948}, true},
		{"8080/TCP", Port{ProtoTCP, 8080}, true},
		{"0/tcp", Port{}, false},
		{"65536/tcp", Port{}, false},
		{"80", Port{}, false},
		{"80/sctp", Port{}, false},
		{"08/tcp", Port{}, false},
		{"x/tcp", Port{}, false},
	} {
		got, err := ParsePort(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParsePort(%q) = %v, %v; want %v, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
	for _, m := range []Mode{ModeOff, ModeSoft, ModeHard} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	if _, err := ParseMode("medium"); err == nil {
		t.Error("ParseMode(medium): got nil error, want one")
	}
}

package bpf

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/reclaimnet/reclaimnet/internal/netnstest"
)

// Verdicts as BPF_PROG_TEST_RUN reports them.
const (
	verdictPass = 0xffffffff // TC_ACT_UNSPEC (-1), TCX_NEXT
	verdictDrop = 2          // TC_ACT_SHOT
)

func verdictName(v uint32) string {
	switch v {
	case verdictPass:
		return "pass"
	case verdictDrop:
		return "drop"
	}
	return "unknown"
}

// loadDetached loads the programs without attaching them, for
// BPF_PROG_TEST_RUN.
func loadDetached(t testing.TB) *Enforcer {
	t.Helper()
	netnstest.RequirePrivileged(t)
	e, err := Open(Config{Iface: "lo", PinDir: netnstest.BPFPinDir(t, "t"), NoEgress: true, NoIngress: true})
	if err != nil {
		netnstest.FailOrSkip(t, "load programs: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// frame describes a test packet: Ethernet + IPv4/IPv6 + TCP/UDP.
type frame struct {
	src, dst     netip.Addr
	proto        uint8 // 6 or 17, or anything else for a bare L3 payload
	sport, dport uint16
	tcpFlags     uint8
	payload      []byte
	ds           uint8 // IPv4 TOS / IPv6 traffic class
	flowLabel    uint32
	// fragOffset is in 8-byte units; moreFrags sets MF. For IPv6 either
	// adds a fragment header.
	fragOffset uint16
	moreFrags  bool
	ipOptions  int     // IPv4 option bytes (multiple of 4, NOPs)
	v6DstOpts  bool    // IPv6: a destination-options header before L4
	ethType    *uint16 // overrides the EtherType
}

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
)

var (
	srcV4 = netip.MustParseAddr("192.0.2.1")
	dstV4 = netip.MustParseAddr("192.0.2.2")
	srcV6 = netip.MustParseAddr("2001:db8::1")
	dstV6 = netip.MustParseAddr("2001:db8::2")
)

func (f frame) l4() []byte {
	switch f.proto {
	case 6:
		h := make([]byte, 20, 20+len(f.payload))
		binary.BigEndian.PutUint16(h[0:], f.sport)
		binary.BigEndian.PutUint16(h[2:], f.dport)
		binary.BigEndian.PutUint32(h[4:], 1000)
		h[12] = 5 << 4
		h[13] = f.tcpFlags
		binary.BigEndian.PutUint16(h[14:], 65535)
		return append(h, f.payload...)
	case 17:
		h := make([]byte, 8, 8+len(f.payload))
		binary.BigEndian.PutUint16(h[0:], f.sport)
		binary.BigEndian.PutUint16(h[2:], f.dport)
		binary.BigEndian.PutUint16(h[4:], uint16(8+len(f.payload)))
		return append(h, f.payload...)
	}
	return append([]byte(nil), f.payload...)
}

func (f frame) bytes() []byte {
	eth := make([]byte, 14)
	copy(eth[0:6], []byte{2, 0, 0, 0, 0, 2})
	copy(eth[6:12], []byte{2, 0, 0, 0, 0, 1})
	l4 := f.l4()
	var out []byte
	if f.dst.Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ihl := 5 + f.ipOptions/4
		ip := make([]byte, ihl*4)
		ip[0] = 4<<4 | byte(ihl)
		ip[1] = f.ds
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(l4)))
		binary.BigEndian.PutUint16(ip[4:], 0x1234)
		fo := f.fragOffset & 0x1fff
		if f.moreFrags {
			fo |= 0x2000
		}
		binary.BigEndian.PutUint16(ip[6:], fo)
		ip[8] = 64
		ip[9] = f.proto
		s, d := f.src.As4(), f.dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		for i := 20; i < len(ip); i++ {
			ip[i] = 1 // NOP option
		}
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
		out = append(append(eth, ip...), l4...)
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		var ext []byte
		next := f.proto
		if f.fragOffset != 0 || f.moreFrags {
			fh := make([]byte, 8)
			fh[0] = next
			v := f.fragOffset << 3
			if f.moreFrags {
				v |= 1
			}
			binary.BigEndian.PutUint16(fh[2:], v)
			binary.BigEndian.PutUint32(fh[4:], 0xabcdef)
			ext = append(fh, ext...)
			next = 44
		}
		if f.v6DstOpts {
			dh := make([]byte, 8)
			dh[0] = next
			dh[1] = 0 // length in 8-byte units beyond the first
			dh[2] = 1 // PadN
			dh[3] = 4 // 4 bytes of padding
			ext = append(dh, ext...)
			next = 60
		}
		ip := make([]byte, 40)
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(f.ds)<<20|f.flowLabel&0xfffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ext)+len(l4)))
		ip[6] = next
		ip[7] = 64
		s, d := f.src.As16(), f.dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		out = append(append(append(eth, ip...), ext...), l4...)
	}
	if f.ethType != nil {
		binary.BigEndian.PutUint16(out[12:], *f.ethType)
	}
	return out
}

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// ipv4HeaderValid reports whether the IPv4 header in an Ethernet frame
// has a correct checksum (the one's complement sum over it is 0xffff).
func ipv4HeaderValid(fr []byte) bool {
	h := fr[14 : 14+int(fr[14]&0x0f)*4]
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

// quicLong returns a QUIC long-header packet start: first byte with the
// fixed bit and the given type bits, the version, and padding to size.
func quicLong(version uint32, typ uint8, size int) []byte {
	b := make([]byte, size)
	b[0] = 0xc0 | typ<<4
	binary.BigEndian.PutUint32(b[1:], version)
	b[5] = 8 // DCID length
	return b
}

// quicShort returns a short-header (1-RTT) packet.
func quicShort(size int) []byte {
	b := make([]byte, size)
	b[0] = 0x40 | 0x01
	return b
}

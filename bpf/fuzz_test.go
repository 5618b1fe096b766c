package bpf

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// ingressOracle is the kill-switch's decision written out in Go, from
// docs/design.md P3.7, independently of the C parser: the fuzz target checks the
// kernel program against it.
func ingressOracle(fr []byte, mode Mode, protected map[Port]bool) uint32 {
	if mode != ModeSoft && mode != ModeHard || len(fr) < 14 {
		return verdictPass
	}
	var (
		proto byte
		l4    int
		frag  bool
	)
	switch binary.BigEndian.Uint16(fr[12:]) {
	case 0x0800:
		if len(fr) < 34 || fr[14]>>4 != 4 || fr[14]&0x0f < 5 {
			return verdictPass
		}
		proto = fr[14+9]
		fo := binary.BigEndian.Uint16(fr[14+6:])
		if fo&0x1fff != 0 {
			return verdictPass // later fragment: no port to judge by
		}
		frag = fo&0x2000 != 0
		l4 = 14 + int(fr[14]&0x0f)*4
	case 0x86dd:
		if len(fr) < 54 || fr[14]>>4 != 6 {
			return verdictPass
		}
		nh, off := fr[14+6], 54
		i := 0
	ext:
		for ; i < 6; i++ {
			switch nh {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if off+2 > len(fr) {
					return verdictPass
				}
				nh, off = fr[off], off+(int(fr[off+1])+1)*8
			case 44: // fragment
				if off+4 > len(fr) {
					return verdictPass
				}
				next, fo := fr[off], binary.BigEndian.Uint16(fr[off+2:])
				nh, off = next, off+8
				if fo&0xfff8 != 0 {
					return verdictPass
				}
				frag = frag || fo&1 != 0
			case 51: // AH
				if off+2 > len(fr) {
					return verdictPass
				}
				nh, off = fr[off], off+(int(fr[off+1])+2)*4
			default:
				break ext
			}
		}
		if i == 6 {
			return verdictPass
		}
		proto, l4 = nh, off
	default:
		return verdictPass
	}
	if proto != 6 && proto != 17 || l4+4 > len(fr) {
		return verdictPass
	}
	if !protected[Port{Protocol(proto), binary.BigEndian.Uint16(fr[l4+2:])}] {
		return verdictPass
	}
	if mode == ModeHard {
		return verdictDrop
	}
	if frag {
		return verdictPass
	}
	if proto == 6 {
		if l4+14 <= len(fr) && fr[l4+13]&0x12 == 0x02 {
			return verdictDrop
		}
		return verdictPass
	}
	if l4+13 > len(fr) || fr[l4+8]&0x80 == 0 {
		return verdictPass
	}
	version, typ := binary.BigEndian.Uint32(fr[l4+9:]), fr[l4+8]>>4&0x03
	if version == quicV1 && typ == 0 || version == quicV2 && typ == 1 {
		return verdictDrop
	}
	return verdictPass
}

// FuzzIngressMatchesOracle runs the ingress program on arbitrary frames
// and modes and compares its verdict with ingressOracle. Its seeds are
// every crafted packet of TestKillSwitchVerdicts.
func FuzzIngressMatchesOracle(f *testing.F) {
	for _, fam := range [][2]netip.Addr{{srcV4, dstV4}, {srcV6, dstV6}} {
		for _, c := range ingressCases(fam[0], fam[1]) {
			in := c.fr.bytes()
			if c.cut > 0 {
				in = in[:c.cut]
			}
			if c.mut != nil {
				c.mut(in)
			}
			f.Add(in, uint8(ModeSoft))
			f.Add(in, uint8(ModeHard))
		}
	}
	e := loadDetached(f)
	protected := map[Port]bool{{ProtoTCP, protTCP}: true, {ProtoUDP, protUDP}: true}
	for p := range protected {
		if err := e.ProtectPorts(p); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, fr []byte, modeByte uint8) {
		mode := Mode(modeByte % 3)
		if err := e.SetKillSwitch(mode); err != nil {
			t.Fatal(err)
		}
		got, _, err := e.ingress.Test(fr)
		if errors.Is(err, unix.EINVAL) {
			return // BPF_PROG_TEST_RUN refuses frames without a whole Ethernet or IP header
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := ingressOracle(fr, mode, protected); got != want {
			t.Errorf("mode %s, frame % x: verdict %s, oracle says %s", mode, fr, verdictName(got), verdictName(want))
		}
	})
}

package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Errors callers act on.
var (
	// ErrUnsupported means the kernel lacks something the programs need;
	// the wrapping error names what.
	ErrUnsupported = errors.New("kernel lacks support")
	// ErrPermission means the process may not load BPF programs or attach
	// them (needs root, or CAP_BPF and CAP_NET_ADMIN).
	ErrPermission = errors.New("operation not permitted (needs root or CAP_BPF+CAP_NET_ADMIN)")
	// ErrNoBPFFS means the pin directory is not on a bpf filesystem.
	ErrNoBPFFS = errors.New("bpffs not mounted (mount -t bpf bpf /sys/fs/bpf)")
	// ErrNotPinned means no enforcer is pinned at the directory: no agent
	// has started on this node, or it shut down cleanly.
	ErrNotPinned = errors.New("no pinned reclaimnet maps")
)

// Limits of the flow table, chosen so that the bucket arithmetic in the
// kernel stays inside 64 bits (see refill in reclaimnet.c).
const (
	// MaxRate is the largest ceiling, bytes per second (~137 Gbit/s).
	MaxRate = 1 << 34
	// MaxBurst is the largest bucket depth, bytes (1 TiB).
	MaxBurst = 1 << 40
	// MaxFlows is the capacity of the flow table.
	MaxFlows = 4096
)

// Protocol is an IP protocol number.
type Protocol uint8

// The protocols the programs look into.
const (
	ProtoTCP Protocol = 6
	ProtoUDP Protocol = 17
)

func (p Protocol) String() string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// FlowKey identifies one transfer as its packets leave the node. Each
// transfer dials from its own socket, so the source port tells transfers
// to the same peer apart.
type FlowKey struct {
	Proto   Protocol
	SrcPort uint16
	Dst     netip.AddrPort
}

func (k FlowKey) String() string {
	return fmt.Sprintf("%s :%d -> %s", k.Proto, k.SrcPort, k.Dst)
}

func (k FlowKey) validate() error {
	if k.Proto != ProtoTCP && k.Proto != ProtoUDP {
		return fmt.Errorf("flow %s: protocol must be tcp or udp", k)
	}
	if !k.Dst.Addr().IsValid() {
		return fmt.Errorf("flow %s: no destination address", k)
	}
	if k.SrcPort == 0 || k.Dst.Port() == 0 {
		return fmt.Errorf("flow %s: ports must be non-zero", k)
	}
	return nil
}

// FlowStats is one flow's entry in the flow table.
type FlowStats struct {
	Key   FlowKey
	Class policy.TrafficClass
	// Rate is the ceiling in bytes per second, Burst the bucket depth and
	// Tokens what is left in it, in bytes.
	Rate, Burst, Tokens uint64
	// Passed and dropped packets and bytes (L2 frame length, a GSO
	// super-packet counted once). Drops are packets over the ceiling:
	// policy violations of a sender that should pace itself below it.
	PassedPackets, PassedBytes   uint64
	DroppedPackets, DroppedBytes uint64
}

// DestCounters are the bytes (L2 frame length) and packets that left the
// node towards one destination since it was first seen. Migration counts
// flows in the flow table (any class); Other counts everything else. The
// table keeps the 4096 most recently active destinations: a destination
// evicted and seen again restarts from zero.
type DestCounters struct {
	MigrationBytes, MigrationPackets uint64
	OtherBytes, OtherPackets         uint64
}

// Mode is the kill-switch mode (docs/design.md P3.7).
type Mode uint32

const (
	// ModeOff passes everything.
	ModeOff Mode = iota
	// ModeSoft drops new connection attempts to the protected ports: TCP
	// SYN without ACK and QUIC long-header Initials (v1 and v2).
	ModeSoft
	// ModeHard drops every packet addressed to a protected port.
	ModeHard
)

func (m Mode) String() string {
	switch m {
	case ModeOff:
		return "off"
	case ModeSoft:
		return "soft"
	case ModeHard:
		return "hard"
	}
	return fmt.Sprintf("mode(%d)", uint32(m))
}

// ParseMode parses "off", "soft" or "hard".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "off":
		return ModeOff, nil
	case "soft":
		return ModeSoft, nil
	case "hard":
		return ModeHard, nil
	}
	return 0, fmt.Errorf("unknown kill-switch mode %q (want off, soft or hard)", s)
}

// Port is a protected port: the node's transfer listener (UDP) or a job's
// service port.
type Port struct {
	Proto  Protocol
	Number uint16
}

func (p Port) String() string { return fmt.Sprintf("%d/%s", p.Number, p.Proto) }

// ParsePort parses "7948/udp" or "8080/tcp".
func ParsePort(s string) (Port, error) {
	num, proto, ok := strings.Cut(s, "/")
	if !ok {
		return Port{}, fmt.Errorf("port %q: want NUMBER/tcp or NUMBER/udp", s)
	}
	var p Port
	switch strings.ToLower(proto) {
	case "tcp":
		p.Proto = ProtoTCP
	case "udp":
		p.Proto = ProtoUDP
	default:
		return Port{}, fmt.Errorf("port %q: protocol must be tcp or udp", s)
	}
	var n uint64
	if _, err := fmt.Sscanf(num, "%d", &n); err != nil || n == 0 || n > 65535 || fmt.Sprint(n) != num {
		return Port{}, fmt.Errorf("port %q: number must be 1-65535", s)
	}
	p.Number = uint16(n)
	return p, nil
}

// KillSwitchStats are the ingress program's counters, summed over CPUs.
type KillSwitchStats struct {
	Seen          uint64 // packets the program ran on
	DroppedSYN    uint64 // soft mode: TCP SYN without ACK
	DroppedQUIC   uint64 // soft mode: QUIC Initials
	DroppedHard   uint64 // hard mode: anything to a protected port
	PassProtected uint64 // soft mode: packets to a protected port passed
	PassUnparsed  uint64 // unparseable, truncated or fragment: passed
}

// Dropped is the total of the drop counters.
func (s KillSwitchStats) Dropped() uint64 { return s.DroppedSYN + s.DroppedQUIC + s.DroppedHard }

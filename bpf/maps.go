package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Names of the pinned maps inside a pin directory (the map names in
// reclaimnet.c).
const (
	pinFlows     = "flows"
	pinDestBytes = "dest_bytes"
	pinKsMode    = "ks_mode"
	pinKsPorts   = "ks_ports"
	pinKsCounts  = "ks_counts"
)

// Maps is a handle on an enforcer's maps. The Enforcer that loaded the
// programs has one; OpenPinned gives another process one from the pins
// alone. All methods are safe for concurrent use (each is one or a few
// syscalls on kernel objects).
type Maps struct {
	// constant after construction
	pinDir    string
	flows     *ebpf.Map
	destBytes *ebpf.Map
	ksMode    *ebpf.Map
	ksPorts   *ebpf.Map
	ksCounts  *ebpf.Map
}

// OpenPinned opens the maps an enforcer pinned in pinDir, so the
// kill-switch can be read and flipped without the agent. It returns an
// error wrapping ErrNotPinned when nothing is pinned there.
func OpenPinned(pinDir string) (*Maps, error) {
	if err := checkBPFFS(pinDir); err != nil {
		return nil, err
	}
	m := &Maps{pinDir: pinDir}
	targets := []struct {
		name string
		dst  **ebpf.Map
	}{
		{pinFlows, &m.flows}, {pinDestBytes, &m.destBytes}, {pinKsMode, &m.ksMode},
		{pinKsPorts, &m.ksPorts}, {pinKsCounts, &m.ksCounts},
	}
	for _, t := range targets {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, t.name), nil)
		if err != nil {
			m.Close()
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil, fmt.Errorf("open pinned map %s in %s: %w", t.name, pinDir, ErrNotPinned)
			case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
				return nil, fmt.Errorf("open pinned map %s: %w", t.name, ErrPermission)
			}
			return nil, fmt.Errorf("open pinned map %s: %w", t.name, err)
		}
		*t.dst = mp
	}
	return m, nil
}

// PinDir is the directory the maps are pinned in.
func (m *Maps) PinDir() string { return m.pinDir }

// Close releases this handle; the pinned maps stay.
func (m *Maps) Close() error {
	var errs []error
	for _, mp := range []*ebpf.Map{m.flows, m.destBytes, m.ksMode, m.ksPorts, m.ksCounts} {
		if mp != nil {
			errs = append(errs, mp.Close())
		}
	}
	return errors.Join(errs...)
}

// SetKillSwitch sets the kill-switch mode; the ingress program applies it
// to the next packet.
func (m *Maps) SetKillSwitch(mode Mode) error {
	if mode > ModeHard {
		return fmt.Errorf("set kill-switch: invalid mode %d", uint32(mode))
	}
	if err := m.ksMode.Update(uint32(0), reclaimnetKsConfig{Mode: uint32(mode)}, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("set kill-switch %s: %w", mode, err)
	}
	return nil
}

// KillSwitch returns the current mode.
func (m *Maps) KillSwitch() (Mode, error) {
	var cfg reclaimnetKsConfig
	if err := m.ksMode.Lookup(uint32(0), &cfg); err != nil {
		return 0, fmt.Errorf("read kill-switch mode: %w", err)
	}
	return Mode(cfg.Mode), nil
}

// ProtectPorts adds ports to the set the kill-switch guards.
func (m *Maps) ProtectPorts(ports ...Port) error {
	for _, p := range ports {
		if (p.Proto != ProtoTCP && p.Proto != ProtoUDP) || p.Number == 0 {
			return fmt.Errorf("protect port %s: want tcp or udp and a non-zero port", p)
		}
		if err := m.ksPorts.Update(portKey(p), uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("protect port %s: %w", p, err)
		}
	}
	return nil
}

// UnprotectPorts removes ports from the protected set; ports not in it
// are ignored.
func (m *Maps) UnprotectPorts(ports ...Port) error {
	for _, p := range ports {
		if err := m.ksPorts.Delete(portKey(p)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("unprotect port %s: %w", p, err)
		}
	}
	return nil
}

// ProtectedPorts lists the protected ports.
func (m *Maps) ProtectedPorts() ([]Port, error) {
	var (
		k     reclaimnetPortKey
		v     uint8
		ports []Port
	)
	it := m.ksPorts.Iterate()
	for it.Next(&k, &v) {
		ports = append(ports, Port{Proto: Protocol(k.Proto), Number: k.Port})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list protected ports: %w", err)
	}
	return ports, nil
}

// KillSwitchStats reads the ingress program's counters.
func (m *Maps) KillSwitchStats() (KillSwitchStats, error) {
	per, err := m.ksCountsPerCPU()
	if err != nil {
		return KillSwitchStats{}, err
	}
	var s KillSwitchStats
	for _, c := range per {
		s.Seen += c.Seen
		s.DroppedSYN += c.DropSyn
		s.DroppedQUIC += c.DropInitial
		s.DroppedHard += c.DropHard
		s.PassProtected += c.PassProtected
		s.PassUnparsed += c.PassUnparsed
	}
	return s, nil
}

func (m *Maps) ksCountsPerCPU() ([]reclaimnetKsStats, error) {
	var per []reclaimnetKsStats
	if err := m.ksCounts.Lookup(uint32(0), &per); err != nil {
		return nil, fmt.Errorf("read kill-switch counters: %w", err)
	}
	return per, nil
}

// firstDrop returns the CLOCK_MONOTONIC time (ns) of the first drop since
// the last resetFirstDrop, or 0 if none. Used by the latency benchmark.
func (m *Maps) firstDrop() (uint64, error) {
	per, err := m.ksCountsPerCPU()
	if err != nil {
		return 0, err
	}
	var first uint64
	for _, c := range per {
		if c.FirstDropNs != 0 && (first == 0 || c.FirstDropNs < first) {
			first = c.FirstDropNs
		}
	}
	return first, nil
}

func (m *Maps) resetFirstDrop() error {
	per, err := m.ksCountsPerCPU()
	if err != nil {
		return err
	}
	for i := range per {
		per[i].FirstDropNs = 0
	}
	return m.ksCounts.Update(uint32(0), per, ebpf.UpdateExist)
}

// SetFlow puts a flow in the flow table or changes its class and
// ceiling. rate is the ceiling in bytes per second (the sender paces
// itself below it; docs/design.md P3.5 puts it ~10 % above the assigned rate) and
// burst the bucket depth in bytes (at least 256 KB for QUIC with GSO). A
// new flow starts with a full bucket; a changed flow keeps its tokens (up
// to the new burst) and counters. class ClassNone counts the flow as
// migration traffic and enforces its ceiling without marking it.
func (m *Maps) SetFlow(k FlowKey, class policy.TrafficClass, rate, burst uint64) error {
	if err := k.validate(); err != nil {
		return err
	}
	if rate == 0 || rate > MaxRate {
		return fmt.Errorf("flow %s: rate %d bytes/s out of range (1..%d)", k, rate, uint64(MaxRate))
	}
	if burst == 0 || burst > MaxBurst {
		return fmt.Errorf("flow %s: burst %d bytes out of range (1..%d)", k, burst, uint64(MaxBurst))
	}
	if class > policy.ClassPresync {
		return fmt.Errorf("flow %s: unknown class %d", k, class)
	}
	key := flowKey(k)
	var v reclaimnetFlowVal
	err := m.flows.LookupWithFlags(key, &v, ebpf.LookupLock)
	switch {
	case errors.Is(err, ebpf.ErrKeyNotExist):
		v = reclaimnetFlowVal{Tokens: burst, LastNs: monotonicNow()}
	case err != nil:
		return fmt.Errorf("set flow %s: %w", k, err)
	}
	v.Class = uint8(class)
	v.Dscp = class.DSCP()
	v.Rate = rate
	v.Burst = burst
	v.Tokens = min(v.Tokens, burst)
	if err := m.flows.Update(key, &v, ebpf.UpdateLock); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("set flow %s: flow table full (%d flows)", k, MaxFlows)
		}
		return fmt.Errorf("set flow %s: %w", k, err)
	}
	return nil
}

// RemoveFlow takes a flow out of the table; its packets are then left
// alone and counted as other traffic. Removing an absent flow is not an
// error.
func (m *Maps) RemoveFlow(k FlowKey) error {
	if err := m.flows.Delete(flowKey(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("remove flow %s: %w", k, err)
	}
	return nil
}

// Flow returns one flow's entry; the error wraps ebpf.ErrKeyNotExist when
// the flow is not in the table.
func (m *Maps) Flow(k FlowKey) (FlowStats, error) {
	var v reclaimnetFlowVal
	if err := m.flows.LookupWithFlags(flowKey(k), &v, ebpf.LookupLock); err != nil {
		return FlowStats{}, fmt.Errorf("look up flow %s: %w", k, err)
	}
	return flowStats(k, &v), nil
}

// FlowStats returns every flow in the table.
func (m *Maps) FlowStats() ([]FlowStats, error) {
	var (
		k    reclaimnetFlowKey
		v    reclaimnetFlowVal
		keys []reclaimnetFlowKey
	)
	// Iterate collects keys; each value is then read under its lock.
	it := m.flows.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	out := make([]FlowStats, 0, len(keys))
	for _, k := range keys {
		if err := m.flows.LookupWithFlags(k, &v, ebpf.LookupLock); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue // removed meanwhile
			}
			return nil, fmt.Errorf("read flow: %w", err)
		}
		out = append(out, flowStats(goFlowKey(k), &v))
	}
	return out, nil
}

// clearFlows empties the flow table.
func (m *Maps) clearFlows() error {
	var (
		k    reclaimnetFlowKey
		v    reclaimnetFlowVal
		keys []reclaimnetFlowKey
	)
	it := m.flows.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list flows: %w", err)
	}
	for _, k := range keys {
		if err := m.flows.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear flows: %w", err)
		}
	}
	return nil
}

// Counters returns the egress byte counters per destination, summed over
// CPUs. The agent samples them (docs/design.md P1.7: every 100 ms) and differences
// successive samples.
func (m *Maps) Counters() (map[netip.Addr]DestCounters, error) {
	var (
		k   reclaimnetDestKey
		per []reclaimnetDestVal
	)
	out := map[netip.Addr]DestCounters{}
	it := m.destBytes.Iterate()
	for it.Next(&k, &per) {
		var c DestCounters
		for _, v := range per {
			c.MigrationBytes += v.MigrationBytes
			c.MigrationPackets += v.MigrationPackets
			c.OtherBytes += v.OtherBytes
			c.OtherPackets += v.OtherPackets
		}
		out[netip.AddrFrom16(k.Addr).Unmap()] = c
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read egress counters: %w", err)
	}
	return out, nil
}

func portKey(p Port) reclaimnetPortKey {
	return reclaimnetPortKey{Port: p.Number, Proto: uint8(p.Proto)}
}

func flowKey(k FlowKey) reclaimnetFlowKey {
	return reclaimnetFlowKey{
		Daddr: k.Dst.Addr().As16(), // IPv4 becomes ::ffff:a.b.c.d, as in the kernel
		Sport: k.SrcPort,
		Dport: k.Dst.Port(),
		Proto: uint8(k.Proto),
	}
}

func goFlowKey(k reclaimnetFlowKey) FlowKey {
	return FlowKey{
		Proto:   Protocol(k.Proto),
		SrcPort: k.Sport,
		Dst:     netip.AddrPortFrom(netip.AddrFrom16(k.Daddr).Unmap(), k.Dport),
	}
}

func flowStats(k FlowKey, v *reclaimnetFlowVal) FlowStats {
	return FlowStats{
		Key: k, Class: policy.TrafficClass(v.Class),
		Rate: v.Rate, Burst: v.Burst, Tokens: v.Tokens,
		PassedPackets: v.PassPackets, PassedBytes: v.PassBytes,
		DroppedPackets: v.DropPackets, DroppedBytes: v.DropBytes,
	}
}

// monotonicNow is CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// checkBPFFS reports ErrNoBPFFS unless dir (or its nearest existing
// ancestor) is on a bpf filesystem.
func checkBPFFS(dir string) error {
	p := filepath.Clean(dir)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			if st.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("%s: %w", dir, ErrNoBPFFS)
			}
			return nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("%s: %w", dir, ErrNoBPFFS)
		}
		p = parent
	}
}

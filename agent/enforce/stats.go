package enforce

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/bpf"
)

// FlowStat is one enforced flow as the status page shows it.
type FlowStat struct {
	Key   string `json:"key"` // udp 10.0.0.1:7948 from :41234
	Class string `json:"class"`
	// Ceiling in bytes/s and Burst in bytes: the kernel's bucket.
	Ceiling uint64 `json:"ceiling_bytes_per_s"`
	Burst   uint64 `json:"burst_bytes"`
	// Passed and Dropped packets and bytes; drops are policy violations
	// (the sender went over its ceiling).
	PassedPackets  uint64 `json:"passed_packets"`
	PassedBytes    uint64 `json:"passed_bytes"`
	DroppedPackets uint64 `json:"dropped_packets"`
	DroppedBytes   uint64 `json:"dropped_bytes"`
}

// Stats is what the status page shows of kernel enforcement.
type Stats struct {
	// Enabled is false with enforcement off; OffReason says why.
	Enabled   bool   `json:"enabled"`
	OffReason string `json:"off_reason,omitempty"`
	Iface     string `json:"iface,omitempty"`
	PinDir    string `json:"pin_dir,omitempty"`
	// Attach is how each program is attached ("egress": "tcx").
	Attach map[string]string `json:"attach,omitempty"`
	// KillSwitch is the mode: off, soft or hard.
	KillSwitch string `json:"kill_switch"`
	// Protected are the ports the kill-switch guards ("7948/udp").
	Protected []string `json:"protected,omitempty"`
	// KillSwitchDrops counts connection attempts (soft) and packets
	// (hard) the ingress program dropped.
	KillSwitchDrops    uint64     `json:"kill_switch_drops"`
	KillSwitchDropSYN  uint64     `json:"kill_switch_drop_syn"`
	KillSwitchDropQUIC uint64     `json:"kill_switch_drop_quic"`
	KillSwitchDropHard uint64     `json:"kill_switch_drop_hard"`
	Flows              []FlowStat `json:"flows"`
	// PolicyViolations is the dropped packets of all flows.
	PolicyViolations uint64 `json:"policy_violations"`
	// Buildings are the per-destination-building rates and estimates of
	// the last sample (an entry with an empty building is traffic outside
	// the cluster); NonMigration the node's total non-migration egress.
	Buildings    []BuildingRates `json:"buildings"`
	NonMigration float64         `json:"non_migration_bytes_per_s"`
	SampledAt    time.Time       `json:"sampled_at"`
}

// Stats reads the kernel's counters and the last sample.
func (e *Enforcer) Stats() (Stats, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bpf == nil {
		reason := e.cfg.OffReason
		if !e.cfg.Off {
			reason = "not running"
		}
		return Stats{OffReason: reason, KillSwitch: "off"}, nil
	}
	s := Stats{Enabled: true, Iface: e.cfg.Iface, PinDir: e.bpf.PinDir(), Attach: map[string]string{}}
	for dir, m := range e.bpf.Attached() {
		s.Attach[dir] = m.String()
	}
	mode, err := e.bpf.KillSwitch()
	if err != nil {
		return Stats{}, fmt.Errorf("enforcement stats: %w", err)
	}
	s.KillSwitch = mode.String()
	ports, err := e.bpf.ProtectedPorts()
	if err != nil {
		return Stats{}, fmt.Errorf("enforcement stats: %w", err)
	}
	for _, p := range ports {
		s.Protected = append(s.Protected, p.String())
	}
	slices.Sort(s.Protected)
	ks, err := e.bpf.KillSwitchStats()
	if err != nil {
		return Stats{}, fmt.Errorf("enforcement stats: %w", err)
	}
	s.KillSwitchDrops, s.KillSwitchDropSYN, s.KillSwitchDropQUIC, s.KillSwitchDropHard = ks.Dropped(), ks.DroppedSYN, ks.DroppedQUIC, ks.DroppedHard
	flows, err := e.bpf.FlowStats()
	if err != nil {
		return Stats{}, fmt.Errorf("enforcement stats: %w", err)
	}
	s.Flows = make([]FlowStat, 0, len(flows))
	for _, f := range flows {
		s.Flows = append(s.Flows, FlowStat{Key: f.Key.String(), Class: f.Class.String(), Ceiling: f.Rate, Burst: f.Burst,
			PassedPackets: f.PassedPackets, PassedBytes: f.PassedBytes, DroppedPackets: f.DroppedPackets, DroppedBytes: f.DroppedBytes})
		s.PolicyViolations += f.DroppedPackets
	}
	slices.SortFunc(s.Flows, func(a, b FlowStat) int { return strings.Compare(a.Key, b.Key) })
	s.Buildings, s.NonMigration, s.SampledAt = e.smp.snapshot()
	return s, nil
}

// FlowStats returns the kernel's entry for one binding's flow: the
// ceiling it enforces and what passed and was dropped.
func (e *Enforcer) FlowStats(b FlowBinding) (bpf.FlowStats, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	enf, err := e.maps()
	if err != nil {
		return bpf.FlowStats{}, err
	}
	return enf.Flow(b.Key())
}

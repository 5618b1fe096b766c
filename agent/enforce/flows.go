package enforce

import (
	"errors"
	"fmt"
	"math"
	"net/netip"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/policy"
)

// FlowBinding is one flow that concerns this node, bound to the socket it
// leaves from: each transfer dials from its own UDP socket, so its local
// port tells it apart from other transfers to the same peer.
type FlowBinding struct {
	// Proto is the transport; zero means UDP (QUIC transfers).
	Proto bpf.Protocol
	// LocalPort is the sender socket's port on this node.
	LocalPort uint16
	// Dst is the receiver's address and port.
	Dst netip.AddrPort
	// Decision carries the class, the paced rate and the ceiling/burst.
	Decision policy.FlowDecision
}

// Key is the binding's BPF flow key.
func (b FlowBinding) Key() bpf.FlowKey {
	proto := b.Proto
	if proto == 0 {
		proto = bpf.ProtoUDP
	}
	return bpf.FlowKey{Proto: proto, SrcPort: b.LocalPort, Dst: netip.AddrPortFrom(b.Dst.Addr().Unmap(), b.Dst.Port())}
}

// bucket returns the ceiling (bytes/s) and burst (bytes) the kernel
// enforces for d: at least policy.DefaultCeilingFactor × Rate and
// policy.DefaultMinBurst (less collapses QUIC's throughput).
func bucket(d policy.FlowDecision) (rate, burst uint64, err error) {
	if math.IsNaN(d.Rate) || math.IsNaN(d.Ceiling) || d.Rate < 0 || d.Ceiling < 0 {
		return 0, 0, fmt.Errorf("rate %v, ceiling %v: want non-negative numbers", d.Rate, d.Ceiling)
	}
	c := math.Max(d.Ceiling, policy.DefaultCeilingFactor*d.Rate)
	if !(c >= 1) {
		return 0, 0, fmt.Errorf("rate %v, ceiling %v: a flow needs a positive rate", d.Rate, d.Ceiling)
	}
	rate = uint64(math.Min(math.Ceil(c), bpf.MaxRate))
	burst = uint64(min(max(d.Burst, policy.DefaultMinBurst), bpf.MaxBurst))
	return rate, burst, nil
}

type flowEntry struct {
	class       policy.TrafficClass
	rate, burst uint64
}

// ApplyFlows makes the kernel flow table equal to bindings: new flows are
// installed, changed ones updated (keeping their tokens and counters),
// flows not in bindings removed; an unchanged flow is not written. A
// binding that cannot be enforced (no positive rate, bad key, duplicate)
// is reported in the error and its existing entry, if any, kept; every
// other binding is still applied. With enforcement off it does nothing.
func (e *Enforcer) ApplyFlows(bindings []FlowBinding) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bpf == nil {
		if e.cfg.Off {
			return nil
		}
		return fmt.Errorf("%w: not started", ErrOff)
	}
	var errs []error
	want := make(map[bpf.FlowKey]flowEntry, len(bindings))
	keep := map[bpf.FlowKey]bool{} // invalid bindings: leave their entry alone
	for _, b := range bindings {
		k := b.Key()
		if !k.Dst.Addr().IsValid() || k.Dst.Port() == 0 || k.SrcPort == 0 || (k.Proto != bpf.ProtoUDP && k.Proto != bpf.ProtoTCP) {
			errs = append(errs, fmt.Errorf("flow %q %s: need TCP or UDP, a local port and a destination address and port", b.Decision.ID, k))
			continue
		}
		if _, dup := want[k]; dup || keep[k] {
			errs = append(errs, fmt.Errorf("flow %q %s: two bindings for one socket", b.Decision.ID, k))
			delete(want, k)
			keep[k] = true
			continue
		}
		rate, burst, err := bucket(b.Decision)
		if err != nil {
			errs = append(errs, fmt.Errorf("flow %q %s: %w", b.Decision.ID, k, err))
			keep[k] = true
			continue
		}
		if b.Decision.Class > policy.ClassPresync {
			errs = append(errs, fmt.Errorf("flow %q %s: unknown class %d", b.Decision.ID, k, b.Decision.Class))
			keep[k] = true
			continue
		}
		want[k] = flowEntry{class: b.Decision.Class, rate: rate, burst: burst}
	}
	have, err := e.bpf.FlowStats()
	if err != nil {
		return fmt.Errorf("apply flows: %w", err)
	}
	present := make(map[bpf.FlowKey]flowEntry, len(have))
	for _, f := range have {
		present[f.Key] = flowEntry{class: f.Class, rate: f.Rate, burst: f.Burst}
		if _, ok := want[f.Key]; ok || keep[f.Key] {
			continue
		}
		if err := e.bpf.RemoveFlow(f.Key); err != nil {
			errs = append(errs, err)
		}
	}
	for k, w := range want {
		if p, ok := present[k]; ok && p == w {
			continue
		}
		if err := e.bpf.SetFlow(k, w.class, w.rate, w.burst); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("apply flows: %w", err)
	}
	return nil
}

package mesh

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/memberlist"
)

// telemetryRetransmitMult is the smallest retransmit multiplier for
// telemetry broadcasts (memberlist.DefaultLANConfig's value).
const telemetryRetransmitMult = 4

// PublishTelemetry stores t as this node's latest report and queues it for
// gossip, replacing any report of this node still waiting in the queue.
// Node, Seq and (if zero) Sent are filled in.
func (m *Mesh) PublishTelemetry(t Telemetry, now time.Time) error {
	t.Leaving = false
	return m.publish(t, now, nil)
}

// publish queues t; done, if not nil, is closed when the broadcast has
// been sent as often as memberlist retransmits it (or was replaced).
func (m *Mesh) publish(t Telemetry, now time.Time, done chan struct{}) error {
	t.Node = m.name
	if t.Sent.IsZero() {
		t.Sent = now
	}
	m.mu.Lock()
	t.Leaving = t.Leaving || m.leaving
	m.seq++
	t.Seq = m.seq
	m.mu.Unlock()
	// Flow progress is advisory: the entries that do not fit (in number
	// or in the packet) are left out, the caller's first ones kept.
	t.Flows = t.Flows[:min(len(t.Flows), MaxFlowEntries)]
	msg, err := t.Encode()
	for errors.Is(err, errTelemetryTooLarge) && len(t.Flows) > 0 {
		t.Flows = t.Flows[:len(t.Flows)-1]
		msg, err = t.Encode()
	}
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	m.mu.Lock()
	if old, ok := m.reports[t.Node]; !ok || old.Seq < t.Seq {
		m.reports[t.Node] = t
	}
	m.mu.Unlock()
	m.queue.QueueBroadcast(&telemetryBroadcast{node: t.Node, msg: msg, done: done})
	return nil
}

// Report returns the latest telemetry held for a node.
func (m *Mesh) Report(node string) (Telemetry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.reports[node]
	return t, ok
}

// accept stores a peer's report if it is newer than the one held, and
// reports whether it did.
func (m *Mesh) accept(t Telemetry) bool {
	if t.Node == m.name {
		return false // our own report echoed back
	}
	m.mu.Lock()
	old, ok := m.reports[t.Node]
	fresh := !ok || old.Seq < t.Seq
	if fresh && (ok || len(m.reports) < maxStateEntries) {
		m.reports[t.Node] = t
		// The leave intent may arrive after memberlist declared the
		// node dead: it left all the same.
		if d, gone := m.departed[t.Node]; gone && t.Leaving && d.State == StateDead {
			d.State = StateLeft
			m.departed[t.Node] = d
			delete(m.failed, t.Node)
		}
	} else {
		fresh = false
	}
	m.mu.Unlock()
	if !fresh {
		m.stale.Add(1)
		return false
	}
	m.accepted.Add(1)
	return true
}

// telemetryBroadcast is one queued report; a newer report from the same
// node invalidates it (memberlist.NamedBroadcast).
type telemetryBroadcast struct {
	node string
	msg  []byte
	done chan struct{} // closed by Finished; may be nil
}

func (b *telemetryBroadcast) Name() string    { return "telemetry/" + b.node }
func (b *telemetryBroadcast) Message() []byte { return b.msg }
func (b *telemetryBroadcast) Finished() {
	if b.done != nil {
		close(b.done)
	}
}
func (b *telemetryBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*telemetryBroadcast)
	return ok && o.node == b.node
}

// delegate implements memberlist.Delegate on Mesh without exporting the
// methods.
type delegate Mesh

func (d *delegate) NodeMeta(limit int) []byte {
	m := (*Mesh)(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.meta) > limit {
		return nil // Encode keeps it under MetaMaxSize; never panic memberlist
	}
	return m.meta
}

// NotifyMsg runs on memberlist's packet goroutine: it copies the buffer,
// decodes, stores and re-gossips, and never blocks.
func (d *delegate) NotifyMsg(buf []byte) {
	m := (*Mesh)(d)
	if len(buf) == 0 {
		m.bad.Add(1)
		return
	}
	msg := append([]byte(nil), buf...)
	t, err := DecodeTelemetry(msg)
	if err != nil {
		m.bad.Add(1)
		m.logger.Debug("drop malformed gossip message", "err", err)
		return
	}
	if !m.accept(t) {
		return
	}
	// Epidemic spread: memberlist sends a user broadcast only from the
	// node that queued it, so each node that learns a newer report passes
	// it on.
	m.queue.QueueBroadcast(&telemetryBroadcast{node: t.Node, msg: msg})
	if m.onTelemetry != nil {
		m.onTelemetry(t)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.queue.GetBroadcasts(overhead, limit)
}

// LocalState sends every report held, so a joining node learns the
// cluster's telemetry at once instead of waiting for the next broadcasts.
func (d *delegate) LocalState(join bool) []byte {
	m := (*Mesh)(d)
	m.mu.Lock()
	reports := make([]Telemetry, 0, len(m.reports))
	for _, t := range m.reports {
		reports = append(reports, t)
	}
	m.mu.Unlock()
	sort.Slice(reports, func(i, j int) bool { return reports[i].Node < reports[j].Node })
	return encodeState(reports)
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	m := (*Mesh)(d)
	reports, err := decodeState(buf)
	if err != nil {
		m.bad.Add(1)
		m.logger.Debug("drop malformed push/pull state", "err", err)
		return
	}
	for _, t := range reports {
		if m.accept(t) && m.onTelemetry != nil {
			m.onTelemetry(t)
		}
	}
}

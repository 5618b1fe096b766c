package mesh

import (
	"net"
	"sort"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemberState is a member's liveness as gossip sees it.
type MemberState string

const (
	StateAlive   MemberState = "alive"
	StateSuspect MemberState = "suspect"
	StateDead    MemberState = "dead"
	StateLeft    MemberState = "left"
)

func memberState(s memberlist.NodeStateType) MemberState {
	switch s {
	case memberlist.StateAlive:
		return StateAlive
	case memberlist.StateSuspect:
		return StateSuspect
	case memberlist.StateDead:
		return StateDead
	}
	return StateLeft
}

// Member is one node as this node sees it.
type Member struct {
	Name  string
	Addr  net.IP
	Port  uint16
	State MemberState
	Meta  Meta
	// MetaErr is set when the member's metadata could not be decoded (an
	// incompatible or hostile peer); Meta then holds only ID.
	MetaErr error
	// Telemetry is the latest report from the member, if any arrived.
	Telemetry    Telemetry
	HasTelemetry bool
}

// EventKind says what happened to a member.
type EventKind uint8

const (
	EventJoin   EventKind = iota + 1 // joined (or came back)
	EventUpdate                      // changed its metadata
	EventLeave                       // left gracefully
	EventFailed                      // declared dead by failure detection
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventFailed:
		return "failed"
	}
	return "unknown"
}

// Event is a membership change handed to the agent.
type Event struct {
	Kind   EventKind
	Member Member
	At     time.Time
}

// Events delivers membership changes. It is closed by Shutdown. If the
// reader lags more than Config.EventBuffer events, newer ones are dropped
// (Stats.EventsDropped); Members always has the full current view.
func (m *Mesh) Events() <-chan Event { return m.events }

// Members returns the live members (memberlist does not tell alive from
// suspect) and the ones that left or failed since this node started,
// sorted by name, with their latest telemetry.
//
// The list is kept from memberlist's event callbacks, which run under
// memberlist's lock: memberlist.Members returns pointers into state that
// memberlist keeps changing after it unlocks, which the race detector
// flags.
func (m *Mesh) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.live)+len(m.departed))
	for name, mem := range m.live {
		mem.Telemetry, mem.HasTelemetry = m.reports[name]
		out = append(out, mem)
	}
	for name, mem := range m.departed {
		if _, ok := m.live[name]; !ok {
			mem.Telemetry, mem.HasTelemetry = m.reports[name]
			out = append(out, mem)
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func toMember(n *memberlist.Node) Member {
	mem := Member{Name: n.Name, Addr: append(net.IP(nil), n.Addr...), Port: n.Port, State: memberState(n.State)}
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		mem.MetaErr = err
		meta = Meta{ID: n.Name}
	}
	mem.Meta = meta
	return mem
}

// maxDeparted bounds the departed members remembered for display.
const maxDeparted = 4096

// emit records the change and hands an event to the agent without
// blocking. It runs on memberlist's goroutines, under memberlist's locks.
func (m *Mesh) emit(kind EventKind, n *memberlist.Node) {
	ev := Event{Kind: kind, Member: toMember(n), At: time.Now()}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch kind {
	case EventJoin, EventUpdate:
		delete(m.departed, n.Name)
		delete(m.failed, n.Name)
		ev.Member.State = StateAlive
		m.live[n.Name] = ev.Member
	case EventLeave, EventFailed:
		delete(m.live, n.Name)
		if kind == EventFailed && m.reports[n.Name].Leaving {
			kind, ev.Kind = EventLeave, EventLeave
		}
		ev.Member.State = StateDead
		if kind == EventLeave {
			ev.Member.State = StateLeft
			delete(m.failed, n.Name)
		} else if len(m.failed) < maxDeparted {
			m.failed[n.Name] = ev.At
		}
		if len(m.departed) < maxDeparted {
			m.departed[n.Name] = ev.Member
		}
	}
	if m.closed {
		return
	}
	select {
	case m.events <- ev:
	default:
		m.dropped.Add(1)
	}
}

// eventDelegate implements memberlist.EventDelegate.
type eventDelegate Mesh

func (e *eventDelegate) NotifyJoin(n *memberlist.Node) {
	m := (*Mesh)(e)
	m.numMembers.Add(1)
	m.emit(EventJoin, n)
}

func (e *eventDelegate) NotifyLeave(n *memberlist.Node) {
	m := (*Mesh)(e)
	m.numMembers.Add(-1)
	kind := EventFailed
	if n.State == memberlist.StateLeft {
		kind = EventLeave
	}
	m.emit(kind, n)
}

func (e *eventDelegate) NotifyUpdate(n *memberlist.Node) {
	(*Mesh)(e).emit(EventUpdate, n)
}

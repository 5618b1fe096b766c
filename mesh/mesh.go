package mesh

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrWrongGossipKey is wrapped by Join when the peer answered but the
// exchange failed in a way a different gossip key (or label) explains.
var ErrWrongGossipKey = errors.New("peer rejected the exchange: is the gossip key the same on both nodes?")

// ErrPeerUnreachable is wrapped by Join when no peer could be contacted.
var ErrPeerUnreachable = errors.New("peer unreachable")

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

// Stats are counters for /metrics.
type Stats struct {
	Members         int    // alive members, self included
	EventsDropped   uint64 // events lost because the agent lagged
	ReportsAccepted uint64 // telemetry reports from peers that replaced older ones
	ReportsStale    uint64 // reports ignored because a newer one was held
	ReportsBad      uint64 // malformed messages and state from peers
}

// telemetryRetransmitMult is the smallest retransmit multiplier for
// telemetry broadcasts (memberlist.DefaultLANConfig's value).
const telemetryRetransmitMult = 4

// Mesh is one node's membership and telemetry.
type Mesh struct {
	// Constant after Create.
	name        string
	logger      *slog.Logger
	list        *memberlist.Memberlist
	queue       *memberlist.TransmitLimitedQueue
	events      chan Event
	onTelemetry func(Telemetry)
	localIP     net.IP // advertised gossip address, read once at Create
	localPort   uint16

	numMembers atomic.Int64 // alive members incl. self (memberlist reports self's join too); read by the broadcast queue
	dropped    atomic.Uint64
	accepted   atomic.Uint64
	stale      atomic.Uint64
	bad        atomic.Uint64

	mu       sync.Mutex
	meta     []byte               // encoded local metadata
	reports  map[string]Telemetry // latest report per node, own included
	live     map[string]Member    // alive members, copied in the event callbacks
	departed map[string]Member    // members that left or failed, until they come back
	failed   map[string]time.Time // members declared dead (not left), when: retried by reconnectLoop
	seq      uint64               // last sequence number this node used
	leaving  bool                 // Leave was called: every later report says so
	closed   bool                 // events channel closed

	stop chan struct{} // closed by Shutdown: ends reconnectLoop
}

// Create starts gossip for one node. It does not join anyone: call Join.
func Create(cfg Config) (*Mesh, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	meta := cfg.Meta
	meta.ID = cfg.Name
	metaBytes, err := meta.Encode()
	if err != nil {
		return nil, fmt.Errorf("node metadata: %w", err)
	}
	buffer := cfg.EventBuffer
	if buffer == 0 {
		buffer = 1024
	}
	m := &Mesh{
		name:        cfg.Name,
		logger:      logger,
		events:      make(chan Event, buffer),
		onTelemetry: cfg.OnTelemetry,
		meta:        metaBytes,
		reports:     map[string]Telemetry{},
		live:        map[string]Member{},
		departed:    map[string]Member{},
		failed:      map[string]time.Time{},
		stop:        make(chan struct{}),
		// Start the sequence at the wall clock so a restarted node's
		// reports are newer than the ones peers still hold from before.
		seq: uint64(time.Now().UnixNano()),
	}

	var mc *memberlist.Config
	switch cfg.Profile {
	case ProfileLocal:
		mc = memberlist.DefaultLocalConfig()
	default:
		mc = memberlist.DefaultLANConfig()
	}
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.AdvertisePort
	if cfg.AdvertisePort == 0 {
		mc.AdvertisePort = cfg.BindPort
	}
	mc.Label = cfg.Label
	mc.Delegate = (*delegate)(m)
	mc.Events = (*eventDelegate)(m)
	mc.Logger = log.New(io.Writer(logWriter{logger: logger.With("subsystem", "memberlist")}), "", 0)
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	}
	if len(cfg.GossipKeys) > 0 {
		ring, err := memberlist.NewKeyring(cfg.GossipKeys[1:], cfg.GossipKeys[0])
		if err != nil {
			return nil, fmt.Errorf("gossip keyring: %w", err)
		}
		mc.Keyring = ring
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	// Each report is sent RetransmitMult·⌈log10(n+1)⌉ times by every node
	// that passes it on. memberlist's Local preset uses 2, with which an
	// update missed some of 20 nodes until the next push/pull (15 s);
	// telemetry keeps the LAN preset's 4 in both profiles.
	m.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return int(m.numMembers.Load()) },
		RetransmitMult: max(mc.RetransmitMult, telemetryRetransmitMult),
	}
	list, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("start gossip on %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
	}
	m.list = list
	self := list.LocalNode()
	m.localIP, m.localPort = append(net.IP(nil), self.Addr...), self.Port
	interval, timeout := cfg.ReconnectInterval, cfg.ReconnectTimeout
	if interval == 0 {
		interval = DefaultReconnectInterval
	}
	if timeout == 0 {
		timeout = DefaultReconnectTimeout
	}
	if interval > 0 {
		go m.reconnectLoop(interval, timeout)
	}
	return m, nil
}

// Name is the local node's name.
func (m *Mesh) Name() string { return m.name }

// LocalAddr is the address and port peers reach this node's gossip on.
func (m *Mesh) LocalAddr() (net.IP, uint16) {
	return append(net.IP(nil), m.localIP...), m.localPort
}

// Join contacts the given peers ("host:port"; a bare host uses the default
// gossip port) and returns how many answered.
func (m *Mesh) Join(peers []string) (int, error) {
	n, err := m.list.Join(peers)
	if n > 0 {
		return n, nil
	}
	if err == nil {
		return 0, errors.New("no peers given")
	}
	// memberlist's multierror spans lines; the CLI prints one.
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n\t* ", "; ")), " ")
	return 0, classifyJoinError(errors.New(msg))
}

// classifyJoinError maps memberlist's join failures to the sentinels the
// CLI explains.
func classifyJoinError(err error) error {
	s := err.Error()
	switch {
	case strings.Contains(s, "connection refused"), strings.Contains(s, "no route"),
		strings.Contains(s, "i/o timeout"), strings.Contains(s, "no such host"),
		strings.Contains(s, "network is unreachable"):
		return fmt.Errorf("%w: %w", ErrPeerUnreachable, err)
	case strings.Contains(s, "EOF"), strings.Contains(s, "decrypt"), strings.Contains(s, "encrypt"),
		strings.Contains(s, "connection reset"), strings.Contains(s, "label"):
		return fmt.Errorf("%w: %w", ErrWrongGossipKey, err)
	}
	return err
}

// Leave announces a graceful departure and waits up to timeout for it to
// spread. Call Shutdown afterwards.
//
// memberlist reports a leave and a failure alike to its peers' event
// delegates, so first a last telemetry report marked Leaving is gossiped
// (waiting up to half the timeout for it to go out), like serf's leave
// intent; peers that saw it report EventLeave instead of EventFailed.
func (m *Mesh) Leave(timeout time.Duration) error {
	sent := make(chan struct{})
	m.mu.Lock()
	m.leaving = true
	last := m.reports[m.name]
	m.mu.Unlock()
	last.Leaving, last.Sent = true, time.Time{}
	if err := m.publish(last, time.Now(), sent); err == nil && m.list.NumMembers() > 1 {
		select {
		case <-sent:
		case <-time.After(timeout / 2):
		}
	}
	if err := m.list.Leave(timeout - timeout/2); err != nil {
		return fmt.Errorf("leave gossip: %w", err)
	}
	return nil
}

// Shutdown stops gossip and the reconnect loop at once and closes the
// Events channel. It is safe to call more than once.
func (m *Mesh) Shutdown() error {
	err := m.list.Shutdown()
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		close(m.events)
		close(m.stop)
	}
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("stop gossip: %w", err)
	}
	return nil
}

// Events delivers membership changes. It is closed by Shutdown. If the
// reader lags more than Config.EventBuffer events, newer ones are dropped
// (Stats.EventsDropped); Members always has the full current view.
func (m *Mesh) Events() <-chan Event { return m.events }

// UpdateMeta announces new metadata to the cluster.
func (m *Mesh) UpdateMeta(meta Meta, timeout time.Duration) error {
	meta.ID = m.name
	b, err := meta.Encode()
	if err != nil {
		return fmt.Errorf("node metadata: %w", err)
	}
	m.mu.Lock()
	m.meta = b
	m.mu.Unlock()
	if err := m.list.UpdateNode(timeout); err != nil {
		return fmt.Errorf("announce metadata: %w", err)
	}
	return nil
}

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

// Stats returns counters for metrics.
func (m *Mesh) Stats() Stats {
	return Stats{
		Members:         m.list.NumMembers(),
		EventsDropped:   m.dropped.Load(),
		ReportsAccepted: m.accepted.Load(),
		ReportsStale:    m.stale.Load(),
		ReportsBad:      m.bad.Load(),
	}
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

// reconnectPerRound bounds the dead members one reconnect round dials:
// each unreachable one can take memberlist's TCP timeout (10 s on a LAN).
const reconnectPerRound = 3

// reconnectLoop tries, every interval, to rejoin a few of the members this
// node declared dead, until Shutdown. A join that reaches one merges both
// sides' views: each node refutes the other's "dead" verdict about itself,
// and the join events bring it back to the agent (and Raft).
func (m *Mesh) reconnectLoop(interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		addrs := m.reconnectTargets(time.Now(), timeout)
		if len(addrs) == 0 {
			continue
		}
		n, err := m.list.Join(addrs)
		if n > 0 {
			m.logger.Info("rejoined members declared dead", "contacted", n, "tried", len(addrs))
		} else {
			m.logger.Debug("reconnect: no dead member answered", "tried", len(addrs), "err", err)
		}
	}
}

// reconnectTargets forgets the members dead for longer than timeout and
// returns the gossip addresses of at most reconnectPerRound of the others,
// chosen at random (none while this node is leaving).
func (m *Mesh) reconnectTargets(now time.Time, timeout time.Duration) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaving || m.closed {
		return nil
	}
	var addrs []string
	for name, since := range m.failed {
		mem, ok := m.departed[name]
		if !ok || now.Sub(since) > timeout {
			delete(m.failed, name)
			continue
		}
		addrs = append(addrs, net.JoinHostPort(mem.Addr.String(), strconv.Itoa(int(mem.Port))))
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return addrs[:min(len(addrs), reconnectPerRound)]
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

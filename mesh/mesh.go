package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/reclaimnet/reclaimnet/internal/hclogslog"
)

// ErrWrongGossipKey is wrapped by Join when the peer answered but the
// exchange failed in a way a different gossip key (or label) explains.
var ErrWrongGossipKey = errors.New("peer rejected the exchange: is the gossip key the same on both nodes?")

// ErrPeerUnreachable is wrapped by Join when no peer could be contacted.
var ErrPeerUnreachable = errors.New("peer unreachable")

// Stats are counters for /metrics.
type Stats struct {
	Members         int    // alive members, self included
	EventsDropped   uint64 // events lost because the agent lagged
	ReportsAccepted uint64 // telemetry reports from peers that replaced older ones
	ReportsStale    uint64 // reports ignored because a newer one was held
	ReportsBad      uint64 // malformed messages and state from peers
}

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
	// memberlist logs through a standard library logger only: its
	// "[LEVEL]" marks give the records their levels.
	mc.Logger = hclogslog.New(logger, "memberlist", hclogslog.Options{Level: hclogslog.LevelTrace}).
		StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
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
	return 0, classifyJoinError(errors.New(joinErrorText(err)))
}

// joinErrorText is memberlist's join error on one line: its multierror's
// parts joined by "; ", without the "N errors occurred:" heading.
func joinErrorText(err error) string {
	var parts []string
	if me, ok := err.(interface{ WrappedErrors() []error }); ok {
		for _, e := range me.WrappedErrors() {
			parts = append(parts, strings.Join(strings.Fields(e.Error()), " "))
		}
	}
	if len(parts) == 0 {
		return strings.Join(strings.Fields(err.Error()), " ")
	}
	return strings.Join(parts, "; ")
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

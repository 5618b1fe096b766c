package raft

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reclaimnet/reclaimnet/state"

	"github.com/boltdb/bolt"
	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb"

	"github.com/reclaimnet/reclaimnet/internal/hclogslog"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
)

// ErrDataDirLocked is returned by Open when another process holds the Raft
// log of the data dir.
var ErrDataDirLocked = errors.New("raft data dir is locked by another process")

// ErrClosed is returned by calls on a coordinator that was shut down.
var ErrClosed = errors.New("coordinator is shut down")

// Coordinator is one node's part of the coordinator: its Raft server, its
// copy of the state machine and, while it leads, the control loop.
type Coordinator struct {
	// Constant after Open.
	cfg    Config
	logger *slog.Logger
	store  *state.Store
	raft   *hraft.Raft
	trans  *hraft.NetworkTransport
	mux    *mux
	bolt   *raftboltdb.BoltStore // nil when in memory
	addr   string
	notify chan bool

	kick         chan struct{} // buffered(1): request an immediate tick
	stop         chan struct{}
	leaderDone   chan struct{} // closed when watchLeadership returned (nil before it starts)
	wg           sync.WaitGroup
	shutdownOnce sync.Once
	shutdownErr  error

	ticks    atomic.Uint64 // policy ticks run on this node as leader
	commits  atomic.Uint64 // decision sets committed by this node
	leading  atomic.Bool   // the leader loop runs (after its barrier)
	lastTick atomic.Int64  // unix nanos of the last tick (Clock time)

	reconcileMu sync.Mutex // one reconcile at a time
	// denySeen is the deny list the admissions were verified against
	// (guarded by reconcileMu).
	denySeen []pki.DenyEntry

	mu sync.Mutex
	// The following are guarded by mu.
	members       []Member
	failedSince   map[policy.NodeID]time.Time
	hazardsPublAt time.Time
	health        map[policy.NodeID]*peerHealth
	admissions    map[policy.NodeID]admissionCheck
	// refused is the last decision set the state machine refused (empty
	// once one commits again): a bug in the policy, logged once and shown.
	refused   string
	refusedAt time.Time
}

// Open starts a coordinator: it opens (or creates) the Raft log under
// cfg.DataDir, listens for peers, and bootstraps a one-voter cluster when
// cfg.Bootstrap is set and the node has no Raft state.
func Open(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Coordinator{
		cfg: cfg, store: state.NewStore(), notify: make(chan bool, 16), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), failedSince: map[policy.NodeID]time.Time{}, health: map[policy.NodeID]*peerHealth{},
		admissions: map[policy.NodeID]admissionCheck{},
	}
	c.logger = cfg.Logger
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.logger = c.logger.With("node", string(cfg.NodeID))
	if c.cfg.Dial == nil {
		c.cfg.Dial = net.DialTimeout
	}
	hlog := hclogslog.New(c.logger, "raft", hclogslog.Options{Level: cfg.RaftLogLevel})

	var (
		logs   hraft.LogStore
		stable hraft.StableStore
		snaps  hraft.SnapshotStore
		err    error
	)
	if cfg.DataDir == "" {
		mem := hraft.NewInmemStore()
		logs, stable, snaps = mem, mem, hraft.NewInmemSnapshotStore()
	} else {
		dir := filepath.Join(cfg.DataDir, "raft")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create raft dir: %w", err)
		}
		c.bolt, err = raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(dir, "raft.db"),
			BoltOptions: &bolt.Options{Timeout: time.Second},
		})
		if err != nil {
			if errors.Is(err, bolt.ErrTimeout) {
				return nil, fmt.Errorf("open %s: %w", dir, ErrDataDirLocked)
			}
			return nil, fmt.Errorf("open raft log: %w", err)
		}
		cache, err := hraft.NewLogCache(512, c.bolt)
		if err != nil {
			_ = c.bolt.Close()
			return nil, fmt.Errorf("raft log cache: %w", err)
		}
		logs, stable = cache, c.bolt
		snaps, err = hraft.NewFileSnapshotStoreWithLogger(dir, cfg.SnapshotRetain, hlog)
		if err != nil {
			_ = c.bolt.Close()
			return nil, fmt.Errorf("raft snapshot store: %w", err)
		}
	}
	fail := func(err error) (*Coordinator, error) {
		if c.mux != nil {
			_ = c.mux.Close()
		}
		if c.bolt != nil {
			_ = c.bolt.Close()
		}
		return nil, err
	}

	ln := cfg.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", cfg.BindAddr)
		if err != nil {
			return fail(fmt.Errorf("listen on %s: %w", cfg.BindAddr, err))
		}
	}
	c.addr = cfg.AdvertiseAddr
	if c.addr == "" {
		c.addr = ln.Addr().String()
		if ta, ok := ln.Addr().(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
			_ = ln.Close()
			return fail(fmt.Errorf("raft listener bound to %s: set an advertise address peers can reach", c.addr))
		}
	}
	serverTLS := c.tlsSource().ServerTLS(alpnRaft)
	if cfg.Enroll != nil {
		serverTLS = enroll.ServerTLS(serverTLS, cfg.Enroll.Identity)
	}
	c.mux = newMux(ln, advertiseAddr(c.addr), serverTLS, c.tlsSource().ClientTLS("", alpnRaft), c.cfg.Dial, c.logger)
	if h := cfg.Enroll; h != nil {
		c.mux.enroll = func(conn *tls.Conn) { h.ServeConn(context.Background(), conn) }
	}
	c.trans = hraft.NewNetworkTransportWithConfig(&hraft.NetworkTransportConfig{
		Stream:  streamLayer{m: c.mux},
		MaxPool: 3,
		Timeout: 10 * time.Second,
		// No pipelining: every AppendEntries is a plain RPC under Timeout.
		// The pipeline's send and decode goroutines can wedge on a peer
		// that vanished mid-stream (seen when a reclaimed node's peer left
		// in the campus demo), and Raft's Shutdown then waits for them
		// for minutes while gossip still calls this node alive.
		MaxRPCsInFlight: 1,
		Logger:          hlog,
	})
	c.mux.start(func(conn net.Conn) {
		peer := peerNode(conn)
		serveForward(conn, func(b []byte) (uint64, error) { return c.applyForwarded(peer, b) })
	})

	rc := hraft.DefaultConfig()
	rc.LocalID = hraft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.NotifyCh = c.notify
	rc.Logger = hlog
	if err := hraft.ValidateConfig(rc); err != nil {
		_ = c.trans.Close()
		return fail(fmt.Errorf("raft config: %w", err))
	}

	hasState, err := hraft.HasExistingState(logs, stable, snaps)
	if err != nil {
		_ = c.trans.Close()
		return fail(fmt.Errorf("read raft state: %w", err))
	}
	c.raft, err = hraft.NewRaft(rc, fsm{c.store}, logs, stable, snaps, c.trans)
	if err != nil {
		_ = c.trans.Close()
		return fail(fmt.Errorf("start raft: %w", err))
	}
	if cfg.Bootstrap && !hasState {
		boot := hraft.Configuration{Servers: []hraft.Server{{
			Suffrage: hraft.Voter, ID: rc.LocalID, Address: hraft.ServerAddress(c.addr),
		}}}
		if err := c.raft.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, hraft.ErrCantBootstrap) {
			_ = c.Shutdown()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	obs := make(chan hraft.Observation, 64)
	observer := hraft.NewObserver(obs, false, func(o *hraft.Observation) bool {
		switch o.Data.(type) {
		case hraft.FailedHeartbeatObservation, hraft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	c.raft.RegisterObserver(observer)
	c.wg.Go(func() {
		defer c.raft.DeregisterObserver(observer)
		c.watchHeartbeats(obs)
	})
	c.leaderDone = make(chan struct{})
	c.wg.Go(func() {
		defer close(c.leaderDone)
		c.watchLeadership()
	})
	return c, nil
}

// ID is the node's ID.
func (c *Coordinator) ID() policy.NodeID { return c.cfg.NodeID }

// tlsSource makes the coordinator's TLS configurations: from the renewing
// identity when there is one.
func (c *Coordinator) tlsSource() pki.TLSSource {
	if c.cfg.Identity != nil {
		return c.cfg.Identity
	}
	return c.cfg.TLS
}

// Addr is the address peers dial to reach this coordinator.
func (c *Coordinator) Addr() string { return c.addr }

// Store is this node's copy of the replicated state.
func (c *Coordinator) Store() *state.Store { return c.store }

// State returns a deep copy of this node's replicated state.
func (c *Coordinator) State() *state.State { return c.store.State() }

// Changed returns a channel closed at the next change of this node's
// replicated state.
func (c *Coordinator) Changed() <-chan struct{} { return c.store.Changed() }

var _ state.Coordinator = (*Coordinator)(nil)

// IsLeader reports whether this node is the Raft leader now.
func (c *Coordinator) IsLeader() bool { return c.raft.State() == hraft.Leader }

// Leader returns the current leader's ID and address, empty if unknown.
func (c *Coordinator) Leader() (policy.NodeID, string) {
	addr, id := c.raft.LeaderWithID()
	return policy.NodeID(id), string(addr)
}

// Ticks is how many control periods this node ran as leader.
func (c *Coordinator) Ticks() uint64 { return c.ticks.Load() }

// DecisionCommits is how many changed decision sets this node committed.
func (c *Coordinator) DecisionCommits() uint64 { return c.commits.Load() }

// LastTick is the (Clock) time of this node's last tick; zero if none.
func (c *Coordinator) LastTick() time.Time {
	n := c.lastTick.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Kick asks the leader loop for an immediate tick (no-op elsewhere).
func (c *Coordinator) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Server is one entry of the Raft configuration.
type Server struct {
	ID     policy.NodeID
	Addr   string
	Role   state.Role
	Leader bool
}

// Servers returns the Raft configuration as this node knows it.
func (c *Coordinator) Servers() ([]Server, error) {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", err)
	}
	_, leader := c.raft.LeaderWithID()
	var out []Server
	for _, s := range f.Configuration().Servers {
		role := state.RoleNonvoter
		if s.Suffrage == hraft.Voter {
			role = state.RoleVoter
		}
		out = append(out, Server{ID: policy.NodeID(s.ID), Addr: string(s.Address), Role: role, Leader: s.ID == leader})
	}
	return out, nil
}

// WaitLeader blocks until some leader is known and returns its ID.
func (c *Coordinator) WaitLeader(ctx context.Context) (policy.NodeID, error) {
	for {
		if _, id := c.raft.LeaderWithID(); id != "" {
			return policy.NodeID(id), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for leader: %w", ErrNoLeader)
		case <-c.stop:
			return "", ErrClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Submit commits cmd through the leader and returns its log index. Any node
// may call it: a follower forwards the command to the leader over TLS and
// retries (commands are idempotent) until the leader answers or ctx ends.
// Without a deadline in ctx, ApplyTimeout bounds the call.
func (c *Coordinator) Submit(ctx context.Context, cmd state.Command) (uint64, error) {
	b, err := state.EncodeCommand(cmd)
	if err != nil {
		return 0, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.ApplyTimeout)
		defer cancel()
	}
	backoff := 10 * time.Millisecond
	var last error
	for {
		select {
		case <-c.stop:
			return 0, ErrClosed
		default:
		}
		idx, err := c.submitOnce(ctx, b)
		if err == nil || !retryable(err) {
			return idx, err
		}
		last = err
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("submit %s: %w (last: %w)", cmd.Kind(), ctx.Err(), last)
		case <-c.stop:
			return 0, ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// retryable reports whether a submit error may succeed on another try:
// leadership moved, or the leader could not be reached.
func retryable(err error) bool {
	var re *RemoteError
	switch {
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader),
		errors.Is(err, hraft.ErrNotLeader), errors.Is(err, hraft.ErrLeadershipLost),
		errors.Is(err, hraft.ErrLeadershipTransferInProgress), errors.Is(err, hraft.ErrEnqueueTimeout):
		return true
	case errors.As(err, &re):
		return false // the leader decided
	case errors.Is(err, hraft.ErrRaftShutdown), errors.Is(err, ErrClosed):
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, errMuxClosed) || strings.Contains(err.Error(), "dial ")
}

func (c *Coordinator) submitOnce(ctx context.Context, b []byte) (uint64, error) {
	if c.raft.State() == hraft.Leader {
		return c.applyLocal(b)
	}
	addr, id := c.raft.LeaderWithID()
	if id == "" {
		return 0, ErrNoLeader
	}
	deadline, _ := ctx.Deadline()
	conn, err := c.mux.dialKind(string(addr), muxForward, time.Until(deadline))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	return forwardOnce(conn, string(id), b, deadline)
}

// applyLocal applies an encoded command on this node as leader.
func (c *Coordinator) applyLocal(b []byte) (uint64, error) {
	f := c.raft.Apply(b, c.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return 0, err
	}
	if resp, ok := f.Response().(error); ok && resp != nil {
		return f.Index(), resp
	}
	return f.Index(), nil
}

// applyForwarded serves a command another node forwarded to this leader.
func (c *Coordinator) applyForwarded(peer policy.NodeID, b []byte) (uint64, error) {
	if c.raft.State() != hraft.Leader {
		return 0, ErrNotLeader
	}
	cmd, err := state.DecodeCommand(b)
	if err != nil {
		return 0, err
	}
	if err := checkForwarder(forwarder{Node: peer, Voter: c.isVoter(peer)}, c.State(), cmd); err != nil {
		c.logger.Warn("rejected a forwarded command", "peer", peer, "kind", cmd.Kind(), "err", err)
		return 0, err
	}
	idx, err := c.applyLocal(b)
	if errors.Is(err, hraft.ErrNotLeader) || errors.Is(err, hraft.ErrLeadershipLost) ||
		errors.Is(err, hraft.ErrLeadershipTransferInProgress) {
		return 0, fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return idx, err
}

// isVoter reports whether id is a voter in the Raft configuration.
func (c *Coordinator) isVoter(id policy.NodeID) bool {
	servers, err := c.Servers()
	if err != nil {
		return false
	}
	for _, s := range servers {
		if s.ID == id {
			return s.Role == state.RoleVoter
		}
	}
	return false
}

// TransferLeadership hands leadership to another voter if this node leads
// (the first step of a graceful shutdown or a reclaim of this node).
func (c *Coordinator) TransferLeadership() error {
	if c.raft.State() != hraft.Leader {
		return nil
	}
	if err := c.raft.LeadershipTransfer().Error(); err != nil {
		return fmt.Errorf("transfer leadership: %w", err)
	}
	return nil
}

// shutdownGrace bounds each wait for Raft's own shutdown.
const shutdownGrace = 3 * time.Second

// Shutdown stops the control loop, Raft and the listener, and closes the
// log. It is safe to call more than once. It does not leave the cluster:
// a graceful exit calls TransferLeadership first and leaves gossip.
func (c *Coordinator) Shutdown() error {
	c.shutdownOnce.Do(func() {
		close(c.stop)
		var errs []error
		// Let the leader loop finish its command first: hashicorp/raft
		// (v1.8.0) never answers an Apply whose committed entry was still
		// queued for the state machine when it shut down, and the loop
		// would wait on it forever (hashicorp/raft issue #498). Without
		// quorum the leader steps down at
		// its lease timeout, which answers the command; shutdownGrace
		// bounds the wait either way.
		if c.leaderDone != nil {
			select {
			case <-c.leaderDone:
			case <-time.After(shutdownGrace):
				c.logger.Warn("leader loop slow to stop; shutting Raft down under it", "after", shutdownGrace)
			}
		}
		// Raft's shutdown waits for its replication goroutines; one stuck
		// on a dead peer must not keep this node from leaving (the owner
		// never waits for the cluster). After shutdownGrace the
		// connections are closed under it, which unblocks their I/O.
		done := make(chan error, 1)
		go func() { done <- c.raft.Shutdown().Error() }()
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
			}
		case <-time.After(shutdownGrace):
			c.logger.Warn("raft shutdown slow; closing its connections", "after", shutdownGrace)
			_ = c.mux.Close()
			select {
			case <-done:
			case <-time.After(shutdownGrace):
				errs = append(errs, fmt.Errorf("raft shutdown: still waiting for replication after %v", 2*shutdownGrace))
			}
		}
		c.wg.Wait()
		_ = c.trans.Close()
		_ = c.mux.Close()
		if c.bolt != nil {
			if err := c.bolt.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close raft log: %w", err))
			}
		}
		c.shutdownErr = errors.Join(errs...)
	})
	return c.shutdownErr
}

// Status is a point-in-time summary of this node's coordinator, for the
// status page, /v1/status and `reclaimnet members`.
type Status struct {
	ID         policy.NodeID
	Addr       string
	RaftState  string     // "Leader", "Follower", "Candidate" or "Shutdown"
	Role       state.Role // in the configuration as this node knows it
	LeaderID   policy.NodeID
	LeaderAddr string
	Term       uint64
	// AppliedIndex is Raft's; StateIndex the last entry that changed the
	// state machine.
	AppliedIndex    uint64
	StateIndex      uint64
	Ticks           uint64
	DecisionCommits uint64
	LastTick        time.Time
	// RefusedDecision is why the state machine refused this leader's last
	// decisions (empty while they commit); RefusedAt when.
	RefusedDecision string
	RefusedAt       time.Time
	Servers         []Server
}

// Status returns this node's view of the coordinator.
func (c *Coordinator) Status() Status {
	s := Status{
		ID: c.cfg.NodeID, Addr: c.addr, RaftState: c.raft.State().String(),
		AppliedIndex: c.raft.AppliedIndex(), StateIndex: c.store.Index(),
		Ticks: c.Ticks(), DecisionCommits: c.DecisionCommits(), LastTick: c.LastTick(),
	}
	c.mu.Lock()
	s.RefusedDecision, s.RefusedAt = c.refused, c.refusedAt
	c.mu.Unlock()
	s.LeaderID, s.LeaderAddr = c.Leader()
	_, _ = fmt.Sscan(c.raft.Stats()["term"], &s.Term)
	if servers, err := c.Servers(); err == nil {
		s.Servers = servers
		for _, sv := range servers {
			if sv.ID == c.cfg.NodeID {
				s.Role = sv.Role
			}
		}
	}
	return s
}

package raft

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
)

// Config configures a Coordinator. Open works on a filled copy; it never
// changes the caller's value.
type Config struct {
	// NodeID is the node's gossip name; it is also its Raft server ID and
	// the name in its certificate.
	NodeID policy.NodeID
	// DataDir holds the Raft log (raft/raft.db, boltdb) and snapshots
	// (raft/snapshots). Empty keeps everything in memory (tests, --dev).
	DataDir string
	// BindAddr is the TCP address the Raft listener binds (default port
	// 7947). Ignored when Listener is set.
	BindAddr string
	// AdvertiseAddr is the address peers dial; empty means the listener's
	// address, which must then not be unspecified (0.0.0.0).
	AdvertiseAddr string
	// Listener, when set, is used instead of binding BindAddr (tests).
	Listener net.Listener
	// Dial opens a connection to a peer; nil uses a net.Dialer (tests pass
	// an in-memory network).
	Dial func(network, addr string, timeout time.Duration) (net.Conn, error)
	// TLS is the node's certificate and the cluster CA: Raft and forwarded
	// commands use mutual TLS 1.3 with it. Required.
	TLS *pki.Bundle
	// Identity, when set, is TLS's certificate as it renews: Raft,
	// forwarding and admission handshakes present the current one.
	Identity *pki.Identity
	// Enroll, when set, serves join, renewal and voter-key requests on the
	// coordinator port (docs/trust.md); nil refuses them.
	Enroll *enroll.Handler

	// Bootstrap makes this node a one-voter cluster when it has no Raft
	// state yet. Joiners leave it false: they are added by the leader.
	Bootstrap bool

	// Raft timings. DefaultConfig uses hashicorp/raft's defaults (the ones
	// Consul and Nomad ship with): 1 s heartbeat and election timeouts,
	// 500 ms leader lease, 50 ms commit timeout.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// ApplyTimeout bounds one Raft apply on the leader (10 s).
	ApplyTimeout time.Duration
	// SnapshotThreshold / SnapshotInterval / SnapshotRetain: snapshot after
	// this many new entries, checked at this interval; keep this many.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	SnapshotRetain    int

	// Voters is the number of voters in a normal cluster (3); LargeVoters
	// (5) once at least LargeClusterSize (20) members are eligible. With
	// fewer than 3 eligible members there is 1 voter: two voters tolerate
	// no more failures than one and double the ways to lose quorum.
	Voters           int
	LargeVoters      int
	LargeClusterSize int
	// DeadServerTimeout: a failed member leaves the Raft configuration
	// after this long (its voting right is handed over at once).
	DeadServerTimeout time.Duration
	// ServerStabilization is how long a non-voter must have been in the
	// configuration, with the leader's heartbeats to it succeeding, before
	// it may be promoted (10 s, autopilot's default); a voter whose
	// heartbeats have failed this long loses its seat.
	ServerStabilization time.Duration

	// ControlPeriod is the leader's tick period (1 s, docs/design.md §4).
	ControlPeriod time.Duration
	// Params are the policy parameters each tick uses.
	Params policy.Params
	// Telemetry supplies members and live figures to the leader; nil runs
	// the leader on the replicated state alone.
	Telemetry Telemetry

	// Clock returns the time the control loop and departure log use.
	Clock func() time.Time
	// Logger receives the coordinator's logs (and hashicorp/raft's at
	// RaftLogLevel and above).
	Logger       *slog.Logger
	RaftLogLevel slog.Level
}

// DefaultRaftPort is the Raft listener's port (docs/design.md §4).
const DefaultRaftPort = 7947

// DefaultConfig returns production settings: hashicorp/raft's default
// timings and a 1 s control period.
func DefaultConfig() Config {
	return Config{
		BindAddr:            fmt.Sprintf("0.0.0.0:%d", DefaultRaftPort),
		HeartbeatTimeout:    time.Second,
		ElectionTimeout:     time.Second,
		LeaderLeaseTimeout:  500 * time.Millisecond,
		CommitTimeout:       50 * time.Millisecond,
		ApplyTimeout:        10 * time.Second,
		SnapshotThreshold:   8192,
		SnapshotInterval:    2 * time.Minute,
		SnapshotRetain:      2,
		Voters:              3,
		LargeVoters:         5,
		LargeClusterSize:    20,
		DeadServerTimeout:   5 * time.Minute,
		ServerStabilization: 10 * time.Second,
		ControlPeriod:       time.Second,
		Params:              policy.DefaultParams(),
		Clock:               time.Now,
		RaftLogLevel:        slog.LevelWarn,
	}
}

// DefaultLocalConfig returns fast settings for one machine and tests: 50 ms
// Raft timeouts (re-election in ~0.1–0.3 s), loopback binding on port 0.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.BindAddr = "127.0.0.1:0"
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.ApplyTimeout = 5 * time.Second
	c.SnapshotInterval = 5 * time.Second
	c.DeadServerTimeout = 2 * time.Second
	c.ServerStabilization = 300 * time.Millisecond
	c.ControlPeriod = 100 * time.Millisecond
	return c
}

// Validate reports the first problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("node id is empty"))
	}
	if c.TLS == nil {
		errs = append(errs, errors.New("no TLS bundle: raft runs over mutual TLS only"))
	} else if c.NodeID != "" && c.TLS.Node != string(c.NodeID) {
		errs = append(errs, fmt.Errorf("certificate is for node %q, not %q", c.TLS.Node, c.NodeID))
	}
	if c.Identity != nil && c.Identity.Node() != string(c.NodeID) {
		errs = append(errs, fmt.Errorf("identity is for node %q, not %q", c.Identity.Node(), c.NodeID))
	}
	if c.Listener == nil && c.BindAddr == "" {
		errs = append(errs, errors.New("no bind address"))
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdvertiseAddr); err != nil {
			errs = append(errs, fmt.Errorf("advertise address: %w", err))
		}
	}
	if c.HeartbeatTimeout < 5*time.Millisecond || c.ElectionTimeout < c.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("timeouts: heartbeat %v must be ≥ 5ms and ≤ election %v", c.HeartbeatTimeout, c.ElectionTimeout))
	}
	if c.LeaderLeaseTimeout <= 0 || c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("leader lease %v must be in (0, heartbeat %v]", c.LeaderLeaseTimeout, c.HeartbeatTimeout))
	}
	if c.CommitTimeout <= 0 || c.ApplyTimeout <= 0 || c.ControlPeriod <= 0 || c.DeadServerTimeout <= 0 || c.ServerStabilization < 0 {
		errs = append(errs, errors.New("commit, apply, control-period and dead-server timeouts must be positive, stabilization not negative"))
	}
	if c.Voters < 1 || c.Voters%2 == 0 || c.LargeVoters < c.Voters || c.LargeVoters%2 == 0 {
		errs = append(errs, fmt.Errorf("voters %d / large %d must be odd and large ≥ normal", c.Voters, c.LargeVoters))
	}
	if c.SnapshotRetain < 1 || c.SnapshotThreshold == 0 || c.SnapshotInterval <= 0 {
		errs = append(errs, errors.New("snapshot retain, threshold and interval must be positive"))
	}
	if !c.Params.Switches.P1 && c.Params.FixedInterval <= 0 {
		errs = append(errs, fmt.Errorf("fixed interval %v: must be positive while P1 is off", c.Params.FixedInterval))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("no clock"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("raft config: %w", errors.Join(errs...))
	}
	return nil
}

package view

import (
	"context"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

// Config is what the view reads from its node.
type Config struct {
	Node     string
	Building string
	Version  string
	Started  time.Time
	// The node's own addresses, and whether its gossip is encrypted.
	GossipAddr, RaftAddr, TransferAddr, HTTPAddr string
	Encrypted                                    bool
	Mesh                                         *mesh.Mesh
	// Gossip is the leader's view of gossip (the coordinator's
	// telemetry): the links come from it.
	Gossip Gossip
	Coord  *raft.Coordinator
	// Jobs is the node's job manager: the transfers it sends.
	Jobs *jobs.Manager
	// Protocols are this node's own protocol settings (used when it
	// leads).
	Protocols state.Protocols
	// Sandbox is how this node runs guest jobs (fixed at start).
	Sandbox web.Sandbox
	// SamplePeriod is how often the bandwidth history is sampled.
	SamplePeriod time.Duration
}

// View is a node's status view: what the status page and its API, the
// members table and the trace export show, built from one copy of the
// replicated state and the gossip member table each time.
type View struct {
	cfg       Config
	bandwidth bandwidthHistory
	// co is the co-departure table from the replicated log (rebuilt only
	// when the log changes; pages are served concurrently).
	coMu sync.Mutex
	co   raft.CoDepartureLog
}

// New returns the view of a running node.
func New(cfg Config) *View { return &View{cfg: cfg} }

// Run samples the bandwidth history for trace export until ctx ends.
func (v *View) Run(ctx context.Context) {
	t := time.NewTicker(max(v.cfg.SamplePeriod, 100*time.Millisecond))
	defer t.Stop()
	for {
		v.bandwidth.sample(v.cfg.Gossip.Links(), time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

package raft

import (
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// Telemetry is what the leader needs from gossip each control period. The
// mesh implements it; every method must be cheap, safe for concurrent use,
// and return values the caller may keep (copies).
type Telemetry interface {
	// Members is the gossip member list, including failed and left
	// members memberlist still remembers.
	Members() []Member
	// Nodes are live per-node figures (free GPUs, load, access link).
	Nodes() []NodeTelemetry
	// Links is the campus graph with smoothed available bandwidth.
	Links() []policy.Link
	// Flows reports the progress of flows the decisions admitted.
	Flows() []state.FlowProgress
}

// MemberStatus is a member's gossip state.
type MemberStatus uint8

const (
	// MemberAlive is a reachable member.
	MemberAlive MemberStatus = iota
	// MemberSuspect is a member gossip suspects; it keeps its place.
	MemberSuspect
	// MemberFailed is a member gossip declared dead.
	MemberFailed
	// MemberLeft is a member that left gracefully.
	MemberLeft
)

func (s MemberStatus) String() string {
	switch s {
	case MemberAlive:
		return "alive"
	case MemberSuspect:
		return "suspect"
	case MemberFailed:
		return "failed"
	case MemberLeft:
		return "left"
	}
	return "unknown"
}

// Member is one gossip member as the coordinator needs it.
type Member struct {
	ID           policy.NodeID
	RaftAddr     string // host:port of its coordinator listener
	GossipAddr   string
	TransferAddr string
	Building     string
	GPU          policy.GPU
	GPUs         int
	Status       MemberStatus
	// Since is when the member's current incarnation joined; uptime is
	// now − Since. Stability ranks long uptimes first.
	Since time.Time
	// Hazard is the member's departure hazard (1/s) as gossip last saw it;
	// the leader prefers its own published estimate when it has one.
	Hazard float64
	// Storage is set for a storage-role node (its gossip metadata says
	// so): the registry records it and P2 prefers it as a holder.
	Storage bool
	// Lab and Pool are the node's failure domains besides its building
	// (gossip metadata), the priors of co-departure.
	Lab, Pool string
	// Paths are the host paths the member's owner lets guest jobs read
	// (mesh.Meta.Paths).
	Paths []string
	// Lending is the owner's lending windows the member announces
	// (mesh.Meta.Lending); the registry keeps them.
	Lending string
}

// NodeTelemetry are a node's live figures.
type NodeTelemetry struct {
	ID         policy.NodeID
	FreeGPUs   int
	Load       float64
	AccessLink string
	// KillSwitch is the node's kill-switch mode as it reports it ("off",
	// "soft", "hard"; empty or "disabled"/"unknown" when it has no kernel
	// layer or does not say).
	KillSwitch string
	// DiskKnown is set when the node reports its data directory:
	// DataWritable and FreeDisk (bytes) then say whether a checkpoint fits.
	DiskKnown    bool
	DataWritable bool
	FreeDisk     int64
	// Draining: the node announced that it leaves (its agent stops).
	Draining bool
	// LentUntil is when the node's owner policy ends its lending (zero:
	// no end known; in the past: not lent now).
	LentUntil time.Time
}

package agent

import (
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
)

// coordinator is what the agent needs of the Raft coordinator (raft/).
// It is an interface so the agent's order of operations does not depend
// on how the coordinator is built.
type coordinator interface {
	// Addr is the address peers reach the Raft listener on.
	Addr() string
	IsLeader() bool
	// Reconcile brings the Raft configuration in line with gossip.
	Reconcile(now time.Time) error
	// LeaveLeadership transfers leadership away if this node leads.
	LeaveLeadership() error
	Shutdown() error
	// Status is the coordinator as node sees it; Roles maps each server
	// to leader, voter or non-voter.
	Status(node string) localapi.RaftStatus
	Roles() map[string]string
	// Hazard is the published hazard estimate of node (1/s), 0 if none.
	Hazard(node string) float64
}

package localapi

import "github.com/reclaimnet/reclaimnet/agent/owner"

// Lending operations (reclaimnet lend).
const (
	// OpLend lends the node now (after a reclaim: withdraws it, kill-switch
	// off), until Request.Until when it is set.
	OpLend = "lend"
	// OpLendStatus reports the owner policy in force, whether the node is
	// lent and why, and what comes next (Response.Lend).
	OpLendStatus = "lend-status"
)

// KindReclaimed: the node is reclaimed (its agent holds it out of the
// cluster until it is lent again), so cluster operations are not served.
const KindReclaimed = "reclaimed"

// OwnerStateFile, inside the data dir, keeps the owner policy's state
// (owner.State as JSON): an owner's reclaim and the hourly cap survive a
// restart of the agent.
const OwnerStateFile = "owner-state.json"

// LendStatus is the answer to the lending operations: owner.Status.
type LendStatus = owner.Status

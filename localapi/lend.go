package localapi

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
// (the owner policy's state as JSON): an owner's reclaim and the hourly cap survive a
// restart of the agent.
const OwnerStateFile = "owner-state.json"

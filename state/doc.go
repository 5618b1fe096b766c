// Package state is ReclaimNet's replicated data model: the records the
// cluster agrees on (node registry, jobs, checkpoint catalogue, departure
// log, published hazard estimates, pending reclaims, the leader's current
// decisions, the reclaim history and cumulative counters), the commands
// that change them with their versioned encoding, the deterministic apply
// logic, and Store, one node's in-memory copy that the consensus layer
// (package raft) feeds log entries in order. It does not depend on the
// consensus engine, so the packages that only read the state or build
// commands (the job manager, the status view) do not link it.
//
// Every node applies the same entries in the same order, so everything
// here is deterministic: apply reads no clock and no randomness, and a
// command applied twice changes nothing the second time.
//
// # Compatibility of the log and snapshots
//
// A log entry is a version byte (CommandVersion), a kind byte and the
// command as JSON; a node reads only its own version and rejects unknown
// fields, so it never half-understands an entry. A snapshot is JSON with its
// own version (snapshotVersion). Entries and snapshots written earlier must
// keep decoding to what they meant. Adding an optional field whose zero
// value means exactly the old behaviour keeps that true, so it needs no
// version bump: old entries simply lack the field and decode to the zero
// value. Renaming, removing or retyping a field, or giving a zero value a
// new meaning, does need a bump (and a reader for the old version while
// clusters still hold such entries).
//
// JobSpec.Signal and JobSpec.Grace (reclaimnet run --signal, --grace) are
// such optional fields: an entry without them decodes to "" and 0, which
// mean the host's defaults (USR1, 30 s); so are JobSpec.Memory and
// JobSpec.CPUs (run --memory, --cpus), whose 0 means "no limit of the
// job's own", the only behaviour before them. MoveJob.At,
// JobRecord.RunningSince and Checkpoint.Written too: zero means "not
// known", and the leader's exposure estimate then falls back to what it
// does know (or to no estimate, which orders nothing). So are
// MoveJob.Stopped, JobRecord.HandoffStopped, JobReport.Ready and
// JobOutcome.Stopped and Resumed: without them a reclaim's downtime is
// not known and the history shows none. So are JobRecord.MaxFailures,
// Failures, FailureLog, LastExit, End and Events, CancelJob.By and At,
// policy.Placement.Reason and policy.Decisions.Ineligible: a record
// without them is a job allowed no failure, none so far, with no story, and
// a done job without End reads as "done"; so are JobReport.Presync and
// JobRecord.StandbyVersion: a report without them tells nothing of the
// standby, and a record without them counts nothing the standby holds; a
// new command kind (JobExited) takes a new Kind value. The one thing the
// version byte cannot guard is an older binary reading a newer entry that
// sets the fields: it rejects the entry as an unknown field rather than
// misreading it (a snapshot's decoder is lenient: an older binary
// restoring a newer snapshot drops the fields and uses its defaults).
// Mixed-version clusters are not supported: upgrade all nodes together.
package state

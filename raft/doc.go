// Package raft is ReclaimNet's coordinator: a replicated state machine (node
// registry, jobs, checkpoint catalogue, departure log, published hazard
// estimates, pending reclaims and the leader's current decisions) kept
// consistent with hashicorp/raft over mutual TLS, the voter-set management
// that keeps a small, stable, building-spread quorum while nodes come and go,
// and the leader's control loop that runs policy.Tick every control period.
//
// Every node runs a Coordinator. Any node may Submit a command: a
// non-leader forwards it to the leader over the same TLS listener that
// carries Raft (the first byte of a connection says which). Every node reads
// what concerns it from its local copy of the state machine (FSM), which
// returns copies and signals changes on a channel.
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
// JobSpec.Signal and JobSpec.Grace (reclaimnet run --signal, --grace) were
// added this way and version 1 was kept: an entry written before them
// decodes to "" and 0, which mean the host's defaults (USR1, 30 s), exactly
// what such a job got before. MoveJob.At, JobRecord.RunningSince and
// Checkpoint.Written too: zero means "not known", and the
// leader's exposure estimate then falls back to what it did know (or to
// no estimate, which orders nothing). The one thing the version byte
// cannot guard is an older binary reading a newer entry that sets the
// fields: it rejects the entry as an unknown field rather than misreading
// it (a snapshot's decoder is lenient: an older binary restoring a newer
// snapshot would drop the fields and use its defaults). ReclaimNet has no
// deployed clusters, so mixed-version clusters are not supported: upgrade
// all nodes together.
//
// hashicorp/raft is imported as hraft so that this package can keep its
// folder's name.
package raft

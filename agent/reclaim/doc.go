// Package reclaim is the owner's reclaim of a node, as the node runs it: a
// scheduled reclaim (notice τ) announced in the replicated state, the soft
// kill-switch at once and the hard one at the deadline, the honest progress
// of every job that ran here (still running, handing off, handed off,
// degraded, finished), the owner's report once every job has left (or at
// the deadline), and the leave; an emergency (reclaim-now) flips the hard
// kill-switch, records what it can within a second or two and leaves at
// once, without the graceful steps.
//
// One goroutine (Flow.Run) owns the flow's state. The control socket's
// requests, the deadline and the progress poll are messages to it; the
// commands it commits go through the coordinator from the requesting
// goroutine or from short-lived submitters whose results come back as
// messages, so a slow leader never holds up the deadline.
//
// The owner's report is kept in the data dir (localapi.ReportFile) so
// 'reclaimnet reclaim --status' shows it after the node left, and in the
// cluster's replicated reclaim history. An emergency's report, which the
// node may not get out before it leaves, stays in the file unreplicated
// and is submitted when the agent runs again. Writing the file is the
// flow's own step at completion, the deadline and replication; a status
// query only reads.
package reclaim

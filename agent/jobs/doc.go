// Package jobs is a node's job manager: the piece of the agent that makes
// periodic checkpoints, scheduled hand-offs and recoveries happen on one
// node (docs/design.md §4, flows 2-4). It reads the replicated
// state (package state) and acts on what concerns its node:
//
//   - Placement. A job the state places here (running or migrating, Node ==
//     this node) is started with the supervisor; a job no longer placed here
//     (cancelled, moved away) is stopped. A job with a committed checkpoint
//     resumes from the freshest committed version (RECLAIMNET_RESTORE_DIR);
//     when a chunk of it is corrupt, the previous version this node holds is
//     used instead.
//   - Periodic checkpoints (P1). Each job is asked for a checkpoint at the
//     interval of its policy.JobDecision. The completed directory is committed
//     into the local ckpt.Store as the job's next version and recorded in the
//     catalogue (a ReplicaComplete whose holder is the source: the state package
//     has no separate "checkpoint" command), then pushed with transfer to the
//     job's standby (class pre-sync, paced at the pre-sync flow's rate or the
//     job's bandwidth b_i, re-paced with SetRate when the decision changes).
//     The receiving node's manager, in its transfer OnCommit hook, submits
//     ReplicaComplete after its atomic local commit; the sender submits the
//     same (idempotent) record after DONE, so one lost submit loses nothing.
//     A version counts (is "committed") once a holder other than its source has
//     it.
//   - Scheduled hand-off (flow 3). On a HandoffDecision from this node with a
//     destination, the job computes until the decision's FinalStart (its
//     final checkpoint's latest safe start); meanwhile, while its versions
//     share most of their bytes, it checkpoints at its last decided
//     interval, and each new version is pushed to the destination (class
//     pre-sync, at the hand-off's reserved rate, only while it lands before
//     FinalStart), so the final transfer moves only the last delta. Then:
//     the final checkpoint if FinalCheckpoint is set, the job is stopped,
//     the version is pushed to the destination (class migration, at the
//     admitted flow's rate, not before the flow's start), then MoveJob is
//     committed; the destination's manager starts the job from the received
//     version. A degraded (or destination-less) hand-off stops the job; it
//     recovers elsewhere from its freshest committed replica once the node
//     has left.
//   - Recovery (flow 4). A placement with Recovery set names a replica holder
//     (From). Design: the holder PUSHES. The holder's manager sees the
//     placement in the replicated decisions and sends the freshest committed
//     version to the destination (class migration, at the flow's rate if one
//     was admitted, else unpaced), so no pull protocol or extra RPC is needed:
//     the decision itself is the request, and it survives leader changes. The
//     destination waits (Config.FetchTimeout) until the version is in its
//     store, restores it and starts the job, then reports the measured restart
//     time with JobReport so the policy learns Tr.
//   - Bundles. A job's bundle goes from the nodes that hold it to the job's
//     node, standby and holders (bundle.go); a first placement's copy to the
//     job's node is the leader's bundle flow, sent by the holder it names at
//     its rate (class migration) like a restore.
//
// Manager.View gives a read-only view for the status page and the CLI, and
// Manager.FlowProgress the progress of admitted flows for the leader's
// telemetry.
//
// Every goroutine has an owner: Run owns one worker goroutine per job hosted
// here and one per recovery push; a worker owns its checkpoint and transfer
// goroutines. Run returns only after all of them ended and every job it
// started has stopped.
package jobs

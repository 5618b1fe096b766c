// Package supervisor runs and supervises one training job process on a
// node: it starts the command confined (package sandbox: its own uid,
// cgroup, mount and PID namespaces; or, with the sandbox off, in its own
// process group) with the checkpoint contract in its environment, asks it
// for checkpoints and hands completed checkpoint directories to the caller
// (the agent commits them into ckpt/), restarts it when it exits 85 after
// checkpointing, captures its output with rotation, measures how long it
// takes to become ready, and stops every process of the job (SIGTERM, then
// SIGKILL after a grace period) so that none survives.
//
// # The job contract
//
// Environment of every job process, and nothing else: PATH
// (sandbox.GuestPATH), HOME (its working directory), LANG
// (sandbox.GuestLANG), its Spec.Env entries (which may override those
// three), CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES naming its GPUs
// (set for every confined job, and for an unconfined one given GPUs), and
//
//	RECLAIMNET_JOB_ID         the job's stable id
//	RECLAIMNET_CKPT_DIR       where to write a checkpoint; the same path for the life
//	                          of the process, emptied by the supervisor before each
//	                          request and moved away once complete, so every request
//	                          sees a fresh, empty directory
//	RECLAIMNET_RESTORE_DIR    the checkpoint to resume from (unset on a first start)
//	RECLAIMNET_RESTART_COUNT  0 on a first start, then 1, 2, ...
//	RECLAIMNET_DEADLINE       RFC 3339 time the node is reclaimed (set only while a
//	                          reclaim is pending when the process starts)
//	RECLAIMNET_DEADLINE_FILE  a file holding that time, kept current: empty when no
//	                          reclaim is pending, one RFC 3339 line otherwise
//	                          (replaced atomically, so a reader never sees half a line)
//	RECLAIMNET_READY_FILE     touch it once state is restored and the checkpoint
//	                          signal handler is installed (WorkDir/control/ready)
//	RECLAIMNET_CKPT_SIGNAL    the checkpoint signal's name without SIG ("USR1")
//
// A checkpoint is requested by sending the checkpoint signal (SIGUSR1 unless
// configured otherwise: USR1 clashes with some stacks, e.g. NCCL) to the
// job's main process only, never to the group: worker processes that do not
// handle it would die of its default action. The signal is not sent before
// the job has touched RECLAIMNET_READY_FILE (before its handler exists the
// signal would kill it); the request waits for readiness within its timeout.
//
// The job reports the outcome in RECLAIMNET_CKPT_DIR:
//
//	.complete  written last, after every checkpoint file is closed: done
//	.failed    the checkpoint could not be written; its text is the reason
//
// Exiting with code 85 after writing a checkpoint (HTCondor's convention)
// also completes it, marker or not: the supervisor hands the checkpoint on
// and restarts the job from it with RECLAIMNET_RESTART_COUNT incremented.
// A .complete written without a request is accepted too (a job that
// checkpoints by itself when it sees a deadline), and a request that
// arrives while the job writes one is completed by it. A job writes its next
// checkpoint only once the directory exists again without a marker (the
// previous one was moved away): files written earlier land in the
// checkpoint being moved. A .complete in a directory with no other file is
// refused as a failed checkpoint. A checkpoint that does not
// complete within its timeout, or fails, is abandoned: its directory is
// removed and never handed on; the job keeps running.
//
// Restart time is measured from the moment the process is started to the
// moment the supervisor sees RECLAIMNET_READY_FILE (with the resolution of
// the poll interval) and reported in an EventReady; a job that never
// touches the file has no measured restart time.
//
// Output (stdout and stderr, interleaved) goes to WorkDir/job.log, rotated
// to job.log.1, job.log.2, ... when it reaches Config.LogMaxBytes. When the
// disk is full, output is dropped (and counted), never allowed to block the
// job.
//
// Stop sends SIGTERM to every process of the job, then SIGKILL after the
// grace period, and returns once none is left (zombies do not count). A
// confined job is its cgroup and PID namespace, so a process that left
// the group with setsid is stopped too; an unconfined job is its process
// group, which such a process escapes. A confined job killed by the OOM
// killer ends with an error wrapping ErrOutOfMemory. Where a
// gpu.Discoverer can list GPU processes, teardown also confirms that none
// of the job's processes still holds a GPU.
//
// # Work directory
//
// WorkDir holds job.log, the deadline file and ckpt/, all the
// supervisor's; a confined job can write only to ckpt/incoming,
// control/ (the ready file) and home/ (its default working directory and
// HOME), which belong to its uid. A finished checkpoint is sealed before
// it is handed on: every entry becomes root's and readable, and one that
// is not a file or directory (a symlink to a host file) fails it.
package supervisor

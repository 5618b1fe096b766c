package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/gpu"
)

// logDrainWait bounds how long teardown waits for the output pipe to drain
// once the process group is empty (a process that escaped the group could
// hold it open forever).
const logDrainWait = 2 * time.Second

// runner is the state of the owner goroutine; only run and what it calls
// touch it.
type runner struct {
	j *Job

	seq          int // number of the next checkpoint
	deadline     time.Time
	restoreDir   string
	restartCount int
	restarts     int // exit-85 restarts under this Job
	droppedEvts  int

	// The current process.
	proc       process
	pid        int // its main process, for status and events
	logPipe    *os.File
	logDone    chan struct{}
	started    time.Time
	isReady    bool
	leaderExit *exitInfo
	incCkpt    string       // latest checkpoint completed by this process
	seen       map[int]bool // processes of the job seen at teardown
	oomKills   uint64       // of the last process, counted at its teardown

	ckpt     *pending
	stopReq  bool
	teardown bool
	killSent bool
	grace    Timer

	finished bool
	exitErr  error
	gpuLeft  []gpu.Process
}

type pending struct {
	req       *ckptReq
	seq       int
	started   time.Time
	timer     Timer
	signalled bool
}

type exitInfo struct {
	code   int
	signal string
}

func (r *runner) cfg() Config { return r.j.cfg }

// startProcess starts a process of the job: a first start or a restart.
func (r *runner) startProcess() error {
	j := r.j
	os.Remove(j.ready)
	if err := j.layout.fresh(); err != nil {
		return err
	}
	if err := writeDeadlineFile(j.deadline, r.deadline); err != nil {
		return err
	}
	vars := map[string]string{
		"RECLAIMNET_JOB_ID":        j.spec.JobID,
		"RECLAIMNET_CKPT_DIR":      j.layout.incoming(),
		"RECLAIMNET_RESTART_COUNT": strconv.Itoa(r.restartCount),
		"RECLAIMNET_DEADLINE_FILE": j.deadline,
		"RECLAIMNET_READY_FILE":    j.ready,
		"RECLAIMNET_CKPT_SIGNAL":   signalName(j.spec.Signal),
		"RECLAIMNET_OUTPUT_DIR":    OutputDir(j.spec.WorkDir),
	}
	if r.restoreDir != "" {
		vars["RECLAIMNET_RESTORE_DIR"] = r.restoreDir
	}
	if !r.deadline.IsZero() {
		vars["RECLAIMNET_DEADLINE"] = r.deadline.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(j.log, "=== reclaimnet: job %s start (restart count %d, restore from %q) at %s ===\n",
		j.spec.JobID, r.restartCount, r.restoreDir, r.cfg().Clock.Now().UTC().Format(time.RFC3339))
	maps.Copy(vars, gpuEnv(j.spec.GPUs, j.sb != nil))
	env := jobEnv(j.home, j.spec.Env, vars)
	pipe, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("output pipe: %w", err)
	}
	var proc process
	if j.sb != nil {
		ro := slices.Clone(j.spec.ReadOnly)
		if r.restoreDir != "" {
			ro = append(ro, r.restoreDir)
		}
		proc, err = startSandboxed(j.sb, sandbox.Spec{Name: j.spec.JobID, Identity: j.id, Argv: j.spec.Command, Env: env,
			Dir: j.spec.Dir, Writable: []string{j.spec.WorkDir}, ReadOnly: ro, GPUs: j.spec.GPUs, Limits: j.spec.Limits, Output: w})
	} else {
		proc, err = startGroup(j.spec.Command, j.spec.Dir, env, w)
	}
	w.Close() // the job holds the only write ends now
	if err != nil {
		pipe.Close()
		return err
	}
	r.proc, r.pid, r.logPipe = proc, proc.pid(), pipe
	r.started = r.cfg().Clock.Now()
	r.logDone = make(chan struct{})
	r.isReady, r.leaderExit, r.incCkpt = false, nil, ""
	r.teardown, r.killSent, r.grace = false, false, nil
	r.seen = map[int]bool{}
	if r.pid != 0 {
		r.seen[r.pid] = true
	}
	logDone := r.logDone
	go func() { // owned by this process: ends at EOF or when teardown closes the pipe
		defer close(logDone)
		buf := make([]byte, 32<<10)
		io.CopyBuffer(j.log, pipe, buf)
	}()
	r.setStatus(func(s *Status) {
		s.PID, s.RestartCount, s.Ready, s.Stopping = r.pid, r.restartCount, false, r.stopReq
	})
	// The job manager logs the start ("job started"); this is the process.
	j.logger.Debug("job process started", "pid", r.pid, "restart_count", r.restartCount, "restore", r.restoreDir)
	r.emit(Event{Kind: EventStarted})
	return nil
}

func exitInfoOf(ps *os.ProcessState) exitInfo {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitInfo{code: -1, signal: ws.Signal().String()}
	}
	return exitInfo{code: ps.ExitCode()}
}

// run is the owner goroutine.
func (r *runner) run() {
	ticker := time.NewTicker(r.cfg().PollInterval)
	defer ticker.Stop()
	for !r.finished {
		var exitedC <-chan exitInfo
		if r.leaderExit == nil {
			exitedC = r.proc.exited()
		}
		var timeoutC, graceC <-chan time.Time
		var cancelC <-chan struct{}
		if r.ckpt != nil {
			timeoutC, cancelC = r.ckpt.timer.C(), r.ckpt.req.ctx.Done()
		}
		if r.grace != nil {
			graceC = r.grace.C()
		}
		select {
		case m := <-r.j.msgs:
			r.handle(m)
		case ex := <-exitedC:
			r.onLeaderExit(ex)
		case <-timeoutC:
			r.timeoutCkpt()
		case <-cancelC:
			r.failCkpt(fmt.Errorf("checkpoint %d abandoned: request cancelled: %w", r.ckpt.seq, r.ckpt.req.ctx.Err()))
		case <-graceC:
			r.grace = nil
			r.killSent = true
			r.j.logger.Warn("grace period over, killing the job's processes", "pid", r.pid)
			r.proc.kill()
		case <-ticker.C:
			r.poll()
		}
	}
	r.finish()
}

func (r *runner) handle(m any) {
	switch m := m.(type) {
	case *ckptReq:
		r.startCkpt(m)
	case stopReq:
		if !r.stopReq {
			r.stopReq = true
			r.setStatus(func(s *Status) { s.Stopping = true })
			r.beginTeardown()
		}
	case deadlineReq:
		r.deadline = m.t
		err := writeDeadlineFile(r.j.deadline, m.t)
		if err != nil {
			r.warn(err)
		}
		m.reply <- err
	}
}

func (r *runner) startCkpt(req *ckptReq) {
	switch {
	case r.teardown || r.stopReq:
		req.reply <- ckptReply{err: ErrNotRunning}
		return
	case r.ckpt != nil:
		req.reply <- ckptReply{err: ErrCheckpointInProgress}
		return
	}
	// The directory is fresh since the last checkpoint, so what is in it
	// the job wrote by itself: a checkpoint it is still writing (the
	// PyTorch example saves when a reclaim deadline appears, just before
	// the final checkpoint is requested) completes this request. Clearing
	// it would leave the job's marker alone in an empty directory, and the
	// final checkpoint lost. Only a failed one, or none, is cleared.
	in := r.j.layout.incoming()
	if !exists(in) || exists(filepath.Join(in, FailedMarker)) {
		if err := r.j.layout.fresh(); err != nil {
			req.reply <- ckptReply{err: fmt.Errorf("checkpoint %d: %w: %w", r.seq, ErrCheckpointFailed, err)}
			return
		}
	}
	// Every attempt takes a number, so an abandoned number is never reused.
	seq := r.seq
	r.seq++
	r.ckpt = &pending{req: req, seq: seq, started: r.cfg().Clock.Now(), timer: r.cfg().Clock.NewTimer(r.j.spec.CheckpointTimeout)}
	r.signalIfReady()
}

// signalIfReady sends the checkpoint signal to the main process once the
// job is ready (before, its handler may not exist and the signal's default
// action would kill it).
func (r *runner) signalIfReady() {
	if r.ckpt == nil || r.ckpt.signalled || !r.isReady || r.leaderExit != nil {
		return
	}
	if err := r.proc.signal(r.j.spec.Signal); err != nil {
		r.failCkpt(fmt.Errorf("checkpoint %d: send %s to pid %d: %w: %w", r.ckpt.seq, signalName(r.j.spec.Signal), r.pid, ErrCheckpointFailed, err))
		return
	}
	r.ckpt.signalled = true
}

func (r *runner) poll() {
	j := r.j
	if !r.isReady && r.leaderExit == nil && exists(j.ready) {
		r.isReady = true
		rt := r.cfg().Clock.Now().Sub(r.started)
		r.setStatus(func(s *Status) { s.Ready, s.RestartTime = true, rt })
		j.logger.Info("job ready", "restart_time", rt, "restart_count", r.restartCount)
		r.emit(Event{Kind: EventReady, RestartTime: rt})
	}
	if !r.teardown {
		r.signalIfReady()
		in := j.layout.incoming()
		switch {
		case exists(filepath.Join(in, CompleteMarker)):
			r.completeCkpt()
		case r.ckpt != nil && exists(filepath.Join(in, FailedMarker)):
			reason, rerr := readMarker(filepath.Join(in, FailedMarker), 4096)
			if rerr != nil {
				reason = "unreadable reason: " + rerr.Error()
			}
			msg := strings.TrimSpace(reason)
			err := fmt.Errorf("checkpoint %d failed in the job: %s: %w", r.ckpt.seq, msg, ErrCheckpointFailed)
			if disk := diskFullError(in); disk != nil {
				err = fmt.Errorf("%w: %w", err, disk)
			} else if strings.Contains(msg, "No space left") || strings.Contains(msg, "ENOSPC") {
				err = fmt.Errorf("%w: %w", err, syscall.ENOSPC)
			}
			r.failCkpt(err)
		}
	}
	if r.teardown {
		r.checkGroup()
	}
}

func (r *runner) timeoutCkpt() {
	p := r.ckpt
	err := fmt.Errorf("checkpoint %d abandoned after %s: %w", p.seq, r.j.spec.CheckpointTimeout, ErrCheckpointTimeout)
	if !p.signalled {
		err = fmt.Errorf("%w (the job never touched RECLAIMNET_READY_FILE, so the %s signal was not sent)", err, signalName(r.j.spec.Signal))
	}
	// Measure before abandoning: removing the partial files frees the space.
	if disk := diskFullError(r.j.layout.incoming()); disk != nil {
		err = fmt.Errorf("%w: %w", err, disk)
	}
	r.failCkpt(err)
}

// completeCkpt hands the incoming directory on as checkpoint r.seq.
func (r *runner) completeCkpt() {
	j := r.j
	var seq int
	if r.ckpt != nil {
		seq = r.ckpt.seq
	} else {
		seq = r.seq
		r.seq++
	}
	if !j.layout.hasContent() {
		// Nothing to restore from: committing it would replace a real
		// checkpoint. A job that writes its next checkpoint before this
		// one was moved away writes its files into the directory being
		// moved and its marker into the fresh one (the contract: wait
		// until the directory is empty again; the Python helper does).
		r.failCkpt(fmt.Errorf("checkpoint %d holds no files, only the %s marker: %w", seq, CompleteMarker, ErrCheckpointFailed))
		return
	}
	dir, err := j.layout.finish(seq)
	if err != nil {
		r.failCkpt(fmt.Errorf("%w: %w", ErrCheckpointFailed, err))
		return
	}
	c := &Checkpoint{Seq: seq, Dir: dir, Bytes: dirBytes(dir), Requested: r.ckpt != nil, RestartCount: r.restartCount}
	if r.ckpt != nil {
		c.Took = r.cfg().Clock.Now().Sub(r.ckpt.started)
	}
	r.incCkpt = dir
	if r.leaderExit == nil {
		if err := j.layout.fresh(); err != nil {
			r.warn(err)
		}
	}
	r.setStatus(func(s *Status) { s.LastCheckpoint = c })
	j.logger.Info("checkpoint ready", "seq", seq, "dir", dir, "bytes", c.Bytes, "took", c.Took, "requested", c.Requested)
	r.emit(Event{Kind: EventCheckpointReady, Checkpoint: c})
	if r.ckpt != nil {
		r.ckpt.timer.Stop()
		r.ckpt.req.reply <- ckptReply{dir: dir}
		r.ckpt = nil
	}
}

// failCkpt abandons the pending (or unsolicited) checkpoint: its directory
// is removed and never handed on.
func (r *runner) failCkpt(err error) {
	j := r.j
	seq := r.seq - 1
	if r.ckpt != nil {
		seq = r.ckpt.seq
	}
	if rmErr := j.layout.abandon(seq); rmErr != nil {
		err = fmt.Errorf("%w (and removing it failed: %w)", err, rmErr)
	}
	if r.leaderExit == nil && !r.teardown {
		if ferr := j.layout.fresh(); ferr != nil {
			r.warn(ferr)
		}
	}
	j.logger.Warn("checkpoint abandoned", "seq", seq, "err", err)
	r.emit(Event{Kind: EventCheckpointFailed, Err: err})
	if r.ckpt != nil {
		r.ckpt.timer.Stop()
		r.ckpt.req.reply <- ckptReply{err: err}
		r.ckpt = nil
	}
}

func (r *runner) onLeaderExit(ex exitInfo) {
	r.leaderExit = &ex
	r.j.logger.Info("job process exited", "pid", r.pid, "code", ex.code, "signal", ex.signal)
	if ex.code == ExitCheckpointed {
		// Exit 85 completes the checkpoint in the directory, marker or not.
		if r.j.layout.hasContent() {
			r.completeCkpt()
		} else if r.ckpt != nil {
			r.failCkpt(fmt.Errorf("checkpoint %d: job exited %d without writing one: %w", r.ckpt.seq, ex.code, ErrJobExited))
		}
		if r.incCkpt == "" {
			r.exitErr = fmt.Errorf("job exited %d (checkpointed) but wrote no checkpoint", ex.code)
		}
	} else if r.ckpt != nil {
		r.failCkpt(fmt.Errorf("checkpoint %d: job exited (code %d %s): %w", r.ckpt.seq, ex.code, ex.signal, ErrJobExited))
	}
	r.beginTeardown()
}

// beginTeardown starts ending the current process and all it started: on
// Stop, or when the main process exited (its children must not outlive
// it).
func (r *runner) beginTeardown() {
	if r.teardown {
		return
	}
	r.teardown = true
	if r.ckpt != nil {
		r.failCkpt(fmt.Errorf("checkpoint %d abandoned: job stopping: %w", r.ckpt.seq, ErrNotRunning))
	}
	members, _ := r.proc.members()
	for _, p := range members {
		r.seen[p] = true
	}
	if r.leaderExit == nil || len(members) > 0 {
		r.j.logger.Info("stopping the job's processes", "pid", r.pid, "members", len(members), "grace", r.j.spec.Grace)
		r.proc.terminate()
		r.grace = r.cfg().Clock.NewTimer(r.j.spec.Grace)
	}
	r.checkGroup()
}

// checkGroup ends the teardown once the main process has ended and no
// process of the job is left.
func (r *runner) checkGroup() {
	if r.leaderExit == nil {
		return
	}
	members, err := r.proc.members()
	if err != nil {
		r.warn(fmt.Errorf("list the job's processes: %w", err))
		return
	}
	if len(members) > 0 {
		for _, p := range members {
			r.seen[p] = true
		}
		if r.killSent {
			r.proc.kill()
		}
		return
	}
	r.teardownDone()
}

func (r *runner) teardownDone() {
	if r.grace != nil {
		r.grace.Stop()
		r.grace = nil
	}
	select {
	case <-r.logDone:
	case <-time.After(logDrainWait):
		r.warn(errors.New("job output pipe still open after its processes ended; closing it"))
	}
	r.logPipe.Close()
	<-r.logDone
	r.oomKills = r.proc.release()
	r.checkGPU()
	if !r.stopReq && r.leaderExit.code == ExitCheckpointed && r.incCkpt != "" {
		from := r.incCkpt
		r.restarts++
		r.restartCount++
		r.restoreDir = from
		r.j.logger.Info("job exited 85: restarting from its checkpoint", "restore", from, "restart_count", r.restartCount)
		r.emit(Event{Kind: EventRestarting, ExitCode: ExitCheckpointed})
		if err := r.startProcess(); err != nil {
			r.exitErr = fmt.Errorf("restart after exit %d: %w", ExitCheckpointed, err)
			r.finished = true
		}
		return
	}
	r.finished = true
}

// checkGPU confirms that none of the job's processes still holds a GPU.
func (r *runner) checkGPU() {
	if r.cfg().GPU == nil {
		return
	}
	pids := make([]int, 0, len(r.seen))
	for p := range r.seen {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg().GPUGoneTimeout)
	defer cancel()
	for {
		left, err := gpu.ProcessesGone(ctx, r.cfg().GPU, pids)
		if err != nil {
			if !errors.Is(err, gpu.ErrNoProcessList) {
				r.warn(fmt.Errorf("gpu teardown check: %w", err))
			}
			return
		}
		if len(left) == 0 {
			r.gpuLeft = nil
			return
		}
		r.gpuLeft = left
		select {
		case <-ctx.Done():
			r.warn(fmt.Errorf("gpu teardown check: %d job processes still hold a GPU after %s: %v", len(left), r.cfg().GPUGoneTimeout, left))
			return
		case <-time.After(r.cfg().PollInterval):
		}
	}
}

func (r *runner) finish() {
	j := r.j
	ex := exitInfo{code: -1}
	if r.leaderExit != nil {
		ex = *r.leaderExit
	}
	res := Result{ExitCode: ex.code, Signal: ex.signal, Stopped: r.stopReq, Restarts: r.restarts, GPUProcessesLeft: r.gpuLeft, OOMKills: r.oomKills}
	switch {
	case r.exitErr != nil:
		res.Err = r.exitErr
	case r.stopReq:
	case ex.signal != "":
		res.Err = fmt.Errorf("job killed by signal %s", ex.signal)
	case ex.code != 0:
		res.Err = fmt.Errorf("job exited with code %d", ex.code)
	}
	if res.Err != nil && r.oomKills > 0 {
		limit := "its memory limit"
		if m := j.spec.Limits.MemoryBytes; m > 0 {
			limit = fmt.Sprintf("its memory limit of %d MiB", m>>20)
		}
		res.Err = fmt.Errorf("%w: the kernel killed %d of its processes at %s or the guests' cap (%w)", ErrOutOfMemory, r.oomKills, limit, res.Err)
	}
	if len(r.gpuLeft) > 0 && res.Err == nil && !r.stopReq {
		res.Err = fmt.Errorf("job processes still hold a GPU: %v", r.gpuLeft)
	}
	j.mu.Lock()
	j.result = res
	j.status.Done, j.status.Stopping = true, false
	j.mu.Unlock()
	j.logger.Info("job ended", "code", res.ExitCode, "signal", res.Signal, "stopped", res.Stopped, "err", res.Err)
	r.emit(Event{Kind: EventExited, ExitCode: res.ExitCode, Err: res.Err})
	close(j.events)
	j.log.Close()
	j.release()
	close(j.done)
}

func (r *runner) warn(err error) {
	r.j.logger.Warn("job warning", "err", err)
	r.emit(Event{Kind: EventWarning, Err: err})
}

func (r *runner) setStatus(f func(*Status)) {
	r.j.mu.Lock()
	f(&r.j.status)
	r.j.mu.Unlock()
}

// emit queues an event without ever blocking: when the buffer is full the
// oldest event is dropped.
func (r *runner) emit(e Event) {
	e.Time = r.cfg().Clock.Now()
	e.PID = r.pid
	e.RestartCount = r.restartCount
	for {
		select {
		case r.j.events <- e:
			return
		default:
		}
		select {
		case <-r.j.events:
			r.droppedEvts++
		default:
		}
	}
}

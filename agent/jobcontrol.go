package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// Job control operations (reclaimnet run, jobs, logs, cancel).
const (
	OpRun    = "run"
	OpJobs   = "jobs"
	OpLogs   = "logs"
	OpCancel = "cancel"
)

// More error kinds for the job operations.
const (
	KindUnknownJob = "unknown_job"
	KindJobExists  = "job_exists"
	KindElsewhere  = "elsewhere" // the job runs on another node (logs)
	KindNoLeader   = "no_leader"
)

// JobRequest is a job to submit (OpRun).
type JobRequest struct {
	// Name is the job's ID; empty makes one up.
	Name       string        `json:"name,omitempty"`
	Command    []string      `json:"command"`
	Env        []string      `json:"env,omitempty"`
	Dir        string        `json:"dir,omitempty"`
	GPUs       int           `json:"gpus,omitempty"`
	VRAM       int64         `json:"vram,omitempty"`
	Capability float64       `json:"capability,omitempty"`
	LossBudget time.Duration `json:"loss_budget,omitempty"`
	// SizeHint is the expected checkpoint size (C until one is measured),
	// RuntimeHint the expected runtime (Trem).
	SizeHint    int64         `json:"size_hint,omitempty"`
	RuntimeHint time.Duration `json:"runtime_hint,omitempty"`
	Owner       string        `json:"owner,omitempty"`
	// Signal requests checkpoints ("USR2"; empty: USR1) and Grace is the
	// time between SIGTERM and SIGKILL at stop (0: 30 s), on every node
	// that runs the job.
	Signal string        `json:"signal,omitempty"`
	Grace  time.Duration `json:"grace,omitempty"`
}

// JobInfo is one job as 'reclaimnet jobs' shows it.
type JobInfo struct {
	ID       string        `json:"id"`
	State    string        `json:"state"`
	Node     string        `json:"node,omitempty"`
	Command  []string      `json:"command"`
	Interval time.Duration `json:"interval_ns"`
	Standby  string        `json:"standby,omitempty"`
	// LastCommitted is the freshest committed checkpoint version (0: none)
	// and Holders the nodes holding it; LastVersion the newest recorded.
	LastCommitted uint64        `json:"last_committed"`
	Holders       []string      `json:"holders,omitempty"`
	LastVersion   uint64        `json:"last_version"`
	Restarts      int           `json:"restarts"`
	RestartTime   time.Duration `json:"restart_time_ns"`
	Submitted     time.Time     `json:"submitted"`
}

var jobNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidJobName reports whether name can be a job ID (it names files and
// directories on every node).
func ValidJobName(name string) error {
	if !jobNameRE.MatchString(name) {
		return fmt.Errorf("job name %q: want 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

func (a *Agent) jobControl(req Request) Response {
	c := a.Coordinator()
	if c == nil {
		return Response{Error: "coordinator not running", Kind: KindInternal}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch req.Op {
	case OpRun:
		return a.runJob(ctx, c, req.Job)
	case OpJobs:
		return Response{Jobs: jobInfos(c.State())}
	case OpLogs:
		return a.jobLog(c, req.JobID, req.Tail)
	case OpCancel:
		if req.JobID == "" {
			return Response{Error: "cancel: no job", Kind: KindBadRequest}
		}
		if _, ok := c.Store().Job(policy.JobID(req.JobID)); !ok {
			return Response{Error: fmt.Sprintf("no job %q", req.JobID), Kind: KindUnknownJob}
		}
		if _, err := c.Submit(ctx, state.CancelJob{Job: policy.JobID(req.JobID)}); err != nil {
			return submitError("cancel", err)
		}
		return Response{JobID: req.JobID}
	}
	return Response{Error: fmt.Sprintf("unknown operation %q", req.Op), Kind: KindBadRequest}
}

func submitError(what string, err error) Response {
	kind := KindInternal
	switch {
	case errors.Is(err, state.ErrUnknownJob):
		kind = KindUnknownJob
	case errors.Is(err, state.ErrJobExists):
		kind = KindJobExists
	case errors.Is(err, raft.ErrNoLeader), errors.Is(err, context.DeadlineExceeded):
		kind = KindNoLeader
	}
	return Response{Error: fmt.Sprintf("%s: %v", what, err), Kind: kind}
}

func (a *Agent) runJob(ctx context.Context, c *raft.Coordinator, jr *JobRequest) Response {
	if jr == nil || len(jr.Command) == 0 || jr.Command[0] == "" {
		return Response{Error: "run: no command", Kind: KindBadRequest}
	}
	if jr.Name == "" {
		b := make([]byte, 4)
		rand.Read(b)
		jr.Name = "job-" + hex.EncodeToString(b)
	}
	if err := ValidJobName(jr.Name); err != nil {
		return Response{Error: "run: " + err.Error(), Kind: KindBadRequest}
	}
	if jr.GPUs < 0 || jr.VRAM < 0 || jr.Capability < 0 || jr.LossBudget < 0 || jr.SizeHint < 0 || jr.RuntimeHint < 0 {
		return Response{Error: "run: negative resource or hint", Kind: KindBadRequest}
	}
	spec := state.JobSpec{Command: jr.Command, Env: jr.Env, Dir: jr.Dir, Grace: jr.Grace}
	if jr.Signal != "" {
		sig, err := state.CanonicalSignal(jr.Signal)
		if err != nil {
			return Response{Error: "run: " + err.Error(), Kind: KindBadRequest}
		}
		spec.Signal = sig
	}
	if jr.Grace != 0 {
		if err := state.ValidStopGrace(jr.Grace); err != nil {
			return Response{Error: "run: " + err.Error(), Kind: KindBadRequest}
		}
	}
	gpus := jr.GPUs
	if gpus == 0 {
		gpus = 1
	}
	rec := state.JobRecord{
		Job: policy.Job{ID: policy.JobID(jr.Name), GPUs: gpus, VRAM: jr.VRAM, Capability: jr.Capability,
			LossBudget: jr.LossBudget, CheckpointBytes: jr.SizeHint, Remaining: jr.RuntimeHint},
		Spec:      spec,
		Owner:     jr.Owner,
		Submitted: time.Now().UTC().Truncate(time.Second),
	}
	if _, err := c.Submit(ctx, state.SubmitJob{Job: rec}); err != nil {
		return submitError("submit job "+jr.Name, err)
	}
	return Response{JobID: jr.Name}
}

// jobInfos lists the catalogue's jobs, sorted by ID.
func jobInfos(st *state.State) []JobInfo {
	intervals := map[policy.JobID]policy.JobDecision{}
	for _, d := range st.Decisions.Jobs {
		intervals[d.Job] = d
	}
	out := []JobInfo{}
	for id, j := range st.Jobs {
		ji := JobInfo{ID: string(id), State: j.State.String(), Node: string(j.Node), Command: j.Spec.Command,
			Restarts: j.Restarts, RestartTime: j.RestartTime, Submitted: j.Submitted}
		if d, ok := intervals[id]; ok {
			ji.Interval, ji.Standby = d.Interval, string(d.Standby)
		}
		if cp, ok := st.FreshestCommitted(id); ok {
			ji.LastCommitted = cp.Version
			for _, h := range cp.Holders {
				ji.Holders = append(ji.Holders, string(h))
			}
		}
		if cps := st.Checkpoints[id]; len(cps) > 0 {
			ji.LastVersion = cps[len(cps)-1].Version
		}
		out = append(out, ji)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out
}

// maxLogBytes bounds what one logs request returns (the end of the log).
const maxLogBytes = 4 << 20

// JobLogPath is where the supervisor writes a job's output on the node
// that runs it.
func JobLogPath(dataDir, job string) string {
	return filepath.Join(dataDir, jobsDirName, job, "run", "job.log")
}

// jobLog returns the end (tail bytes, at most maxLogBytes) of the job's
// log when it runs (or ran) here; otherwise says where it runs.
func (a *Agent) jobLog(c *raft.Coordinator, job string, tail int64) Response {
	if job == "" {
		return Response{Error: "logs: no job", Kind: KindBadRequest}
	}
	if err := ValidJobName(job); err != nil {
		return Response{Error: "logs: " + err.Error(), Kind: KindBadRequest}
	}
	j, ok := c.Store().Job(policy.JobID(job))
	if !ok {
		return Response{Error: fmt.Sprintf("no job %q", job), Kind: KindUnknownJob}
	}
	path := JobLogPath(a.cfg.DataDir, job)
	f, err := os.Open(path)
	if err != nil {
		if j.Node != "" && string(j.Node) != a.cfg.Name {
			return Response{Error: fmt.Sprintf("job %s runs on node %s: run 'reclaimnet logs %s' there", job, j.Node, job), Kind: KindElsewhere, Node: string(j.Node)}
		}
		if errors.Is(err, os.ErrNotExist) {
			return Response{Error: fmt.Sprintf("job %s (%s) has no log on this node yet", job, j.State), Kind: KindElsewhere, Node: string(j.Node)}
		}
		return Response{Error: fmt.Sprintf("read log: %v", err), Kind: KindInternal}
	}
	defer f.Close()
	if tail <= 0 || tail > maxLogBytes {
		tail = maxLogBytes
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > tail {
		f.Seek(fi.Size()-tail, io.SeekStart)
	}
	b, err := io.ReadAll(io.LimitReader(f, tail))
	if err != nil {
		return Response{Error: fmt.Sprintf("read log: %v", err), Kind: KindInternal}
	}
	resp := Response{JobID: job, Log: string(b), Node: a.cfg.Name}
	if j.Node != "" && string(j.Node) != a.cfg.Name {
		resp.Note = fmt.Sprintf("job %s now runs on node %s; this is the log of its run here", job, j.Node)
	}
	return resp
}

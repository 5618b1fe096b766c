package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/view"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// listenControl creates the Unix socket with mode 0666. A socket file left
// by a dead agent is removed (the data-dir lock proves no agent uses it).
func listenControl(dir string) (net.Listener, error) {
	path := filepath.Join(dir, localapi.SocketFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Any local user may connect: the agent identifies each caller by
	// SO_PEERCRED and checks what they ask for (docs/trust.md).
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket permissions: %w", err)
	}
	return ln, nil
}

// serveControl answers requests until the listener is closed.
func (a *Agent) serveControl(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		a.wg.Go(func() { a.handleControl(conn) })
	}
}

func (a *Agent) handleControl(conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req localapi.Request
	br := bufio.NewReader(conn)
	dec := json.NewDecoder(io.LimitReader(br, 64<<10))
	resp := localapi.Response{}
	if who, err := peerCaller(conn); err != nil {
		resp = localapi.Response{Error: fmt.Sprintf("identify the caller: %v", err), Kind: localapi.KindInternal}
	} else if err := dec.Decode(&req); err != nil {
		resp = localapi.Response{Error: fmt.Sprintf("bad request: %v", err), Kind: localapi.KindBadRequest}
	} else if req.Op == localapi.OpFetch {
		// A stream of frames, not one response (localapi.Fetch); what
		// the decoder read past the request is the stream's start, less
		// the blank an encoder may have put after it.
		rest, _ := io.ReadAll(dec.Buffered())
		a.streamFetch(conn, io.MultiReader(bytes.NewReader(bytes.TrimLeft(rest, " \t\r\n")), br), req, who)
		return
	} else {
		resp = a.control(req, who)
	}
	json.NewEncoder(conn).Encode(resp)
}

func (a *Agent) control(req localapi.Request, who caller) localapi.Response {
	switch req.Op {
	case localapi.OpTokenCreate, localapi.OpTokenList, localapi.OpTokenRevoke, localapi.OpNodeRemove:
		return a.identityControl(req, who)
	case localapi.OpMembers:
		st := a.Status()
		return localapi.Response{Status: &st}
	case localapi.OpStatus:
		st := a.Status()
		doc, err := a.webDocument()
		if err != nil {
			return localapi.Response{Error: err.Error(), Kind: localapi.KindInternal}
		}
		return localapi.Response{Status: &st, Document: doc}
	case localapi.OpJoin:
		if !a.isMachineOwner(who) {
			return forbidden("join: user %s is not an owner of machine %s (root, or a user named by the agent's --owners)", who.Name, a.cfg.Name)
		}
		if len(req.Peers) == 0 {
			return localapi.Response{Error: "join: no peers", Kind: localapi.KindBadRequest}
		}
		n, err := a.Join(req.Peers)
		if err != nil {
			kind := localapi.KindInternal
			switch {
			case errors.Is(err, mesh.ErrPeerUnreachable):
				kind = localapi.KindPeerUnreachable
			case errors.Is(err, mesh.ErrWrongGossipKey):
				kind = localapi.KindWrongGossipKey
			}
			return localapi.Response{Error: err.Error(), Kind: kind}
		}
		return localapi.Response{Joined: n}
	case localapi.OpRun, localapi.OpJobs, localapi.OpJob, localapi.OpLogs, localapi.OpCancel:
		return a.jobControl(req, who)
	case localapi.OpTraceExport:
		doc, err := a.view.TraceDocument(time.Now())
		if err != nil {
			return localapi.Response{Error: err.Error(), Kind: localapi.KindInternal}
		}
		return localapi.Response{Trace: string(doc)}
	case localapi.OpReclaim, localapi.OpReclaimStatus, localapi.OpReclaimCancel, localapi.OpReclaimNow,
		localapi.OpLend, localapi.OpLendStatus:
		if req.Node != "" && req.Node != a.cfg.Name {
			return forbidden("%s: this agent is node %s, not %s: a node speaks for its own machine only; run the command on %s", req.Op, a.cfg.Name, req.Node, req.Node)
		}
		if req.Op != localapi.OpReclaimStatus && req.Op != localapi.OpLendStatus && !a.isMachineOwner(who) {
			return forbidden("%s: user %s is not an owner of machine %s (root, or a user named by the agent's --owners)", req.Op, who.Name, a.cfg.Name)
		}
		if a.cfg.Storage() && (req.Op == localapi.OpReclaim || req.Op == localapi.OpReclaimNow || req.Op == localapi.OpLend) {
			// A storage node keeps other jobs' checkpoints and is never
			// lent: nothing of its own to take back.
			return localapi.Response{Error: req.Op + ": this is a storage node (--role storage): it is never lent or reclaimed",
				Kind: localapi.KindBadRequest}
		}
		return a.ownerControl(req)
	}
	return localapi.Response{Error: fmt.Sprintf("unknown operation %q", req.Op), Kind: localapi.KindBadRequest}
}

func (a *Agent) jobControl(req localapi.Request, who caller) localapi.Response {
	c := a.Coordinator()
	if c == nil {
		return localapi.Response{Error: "coordinator not running", Kind: localapi.KindInternal}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch req.Op {
	case localapi.OpRun:
		return a.runJob(ctx, c, req.Job, who)
	case localapi.OpJobs:
		return localapi.Response{Jobs: jobInfos(c.State())}
	case localapi.OpJob:
		st := c.State()
		if _, ok := st.Jobs[policy.JobID(req.JobID)]; !ok {
			return localapi.Response{Error: fmt.Sprintf("no job %q", req.JobID), Kind: localapi.KindUnknownJob}
		}
		return localapi.Response{Story: jobStory(st, policy.JobID(req.JobID))}
	case localapi.OpLogs:
		if j, ok := c.Store().Job(policy.JobID(req.JobID)); ok && !a.mayManage(who, j) {
			return forbidden("logs: job %s belongs to %s; user %s@%s is neither its owner nor a cluster admin", req.JobID, j.Owner, who.Name, a.cfg.Name)
		}
		return a.jobLog(c, req.JobID, req.Tail)
	case localapi.OpCancel:
		if req.JobID == "" {
			return localapi.Response{Error: "cancel: no job", Kind: localapi.KindBadRequest}
		}
		j, ok := c.Store().Job(policy.JobID(req.JobID))
		if !ok {
			return localapi.Response{Error: fmt.Sprintf("no job %q", req.JobID), Kind: localapi.KindUnknownJob}
		}
		if !a.mayManage(who, j) {
			return forbidden("cancel: job %s belongs to %s; user %s@%s is neither its owner nor a cluster admin", req.JobID, j.Owner, who.Name, a.cfg.Name)
		}
		by := who.Name + " on " + a.cfg.Name // the caller the kernel identified
		if _, err := c.Submit(ctx, state.CancelJob{Job: policy.JobID(req.JobID), By: by, At: time.Now().UTC(), Requester: a.requester(who)}); err != nil {
			return submitError("cancel", err)
		}
		return localapi.Response{JobID: req.JobID}
	}
	return localapi.Response{Error: fmt.Sprintf("unknown operation %q", req.Op), Kind: localapi.KindBadRequest}
}

func submitError(what string, err error) localapi.Response {
	kind := localapi.KindInternal
	switch {
	case errors.Is(err, state.ErrUnknownJob):
		kind = localapi.KindUnknownJob
	case errors.Is(err, state.ErrJobExists):
		kind = localapi.KindJobExists
	case errors.Is(err, raft.ErrNoLeader), errors.Is(err, context.DeadlineExceeded):
		kind = localapi.KindNoLeader
	case errors.Is(err, raft.ErrForbidden):
		kind = localapi.KindForbidden
	}
	return localapi.Response{Error: fmt.Sprintf("%s: %v", what, err), Kind: kind}
}

func (a *Agent) runJob(ctx context.Context, c *raft.Coordinator, jr *localapi.JobRequest, who caller) localapi.Response {
	if jr == nil || len(jr.Command) == 0 || jr.Command[0] == "" {
		return localapi.Response{Error: "run: no command", Kind: localapi.KindBadRequest}
	}
	if jr.Name == "" {
		b := make([]byte, 4)
		rand.Read(b)
		jr.Name = "job-" + hex.EncodeToString(b)
	}
	if err := localapi.ValidJobName(jr.Name); err != nil {
		return localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindBadRequest}
	}
	if jr.MaxFailures < 0 || jr.MaxFailures > state.MaxMaxFailures {
		return localapi.Response{Error: fmt.Sprintf("run: max failures %d: want 0 to %d", jr.MaxFailures, state.MaxMaxFailures), Kind: localapi.KindBadRequest}
	}
	if jr.GPUs < 0 || jr.VRAM < 0 || jr.Capability < 0 || jr.LossBudget < 0 || jr.SizeHint < 0 || jr.RuntimeHint < 0 {
		return localapi.Response{Error: "run: negative resource or hint", Kind: localapi.KindBadRequest}
	}
	if jr.Replicas != 0 {
		if err := state.ValidReplicas(jr.Replicas); err != nil {
			return localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindBadRequest}
		}
	}
	spec := state.JobSpec{Command: jr.Command, Env: jr.Env, Dir: jr.Dir, Grace: jr.Grace, Memory: jr.Memory, CPUs: jr.CPUs, Keep: jr.Keep}
	if jr.Keep < 0 {
		return localapi.Response{Error: "run: negative keep time", Kind: localapi.KindBadRequest}
	}
	if err := state.ValidJobLimits(jr.Memory, jr.CPUs); err != nil {
		return localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindBadRequest}
	}
	if jr.Signal != "" {
		sig, err := state.CanonicalSignal(jr.Signal)
		if err != nil {
			return localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindBadRequest}
		}
		spec.Signal = sig
	}
	if jr.Grace != 0 {
		if err := state.ValidStopGrace(jr.Grace); err != nil {
			return localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindBadRequest}
		}
	}
	if len(jr.ROPaths) > 0 {
		if err := checkROPaths(c.State(), jr.ROPaths); err != nil {
			return localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindBadRequest}
		}
		spec.ROPaths = slices.Clone(jr.ROPaths)
	}
	if jr.Workdir != "" {
		spec.Command = slices.Clone(jr.Command)
		if resp := a.takeBundle(jr, &spec, who); resp != nil {
			return *resp
		}
	}
	gpus := jr.GPUs
	if gpus == 0 {
		gpus = 1
	}
	rec := state.JobRecord{
		Job: policy.Job{ID: policy.JobID(jr.Name), GPUs: gpus, VRAM: jr.VRAM, Capability: jr.Capability,
			LossBudget: jr.LossBudget, CheckpointBytes: jr.SizeHint, Remaining: jr.RuntimeHint, Copies: jr.Replicas},
		Spec:        spec,
		Owner:       a.ownerName(who),
		Submitted:   time.Now().UTC().Truncate(time.Second),
		MaxFailures: jr.MaxFailures,
	}
	for k := range jr.Secrets {
		if err := pki.ValidEnvName(k); err != nil {
			return localapi.Response{Error: "run: secret: " + err.Error(), Kind: localapi.KindBadRequest}
		}
	}
	sealed, err := sealSecrets(c.State(), jr.Name, jr.Secrets)
	if err != nil {
		return localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindBadRequest}
	}
	rec.Spec.Secrets = sealed
	if _, err := c.Submit(ctx, state.SubmitJob{Job: rec}); err != nil {
		if old, ok := c.Store().Job(policy.JobID(jr.Name)); spec.Bundle != "" && (!ok || old.Spec.Bundle != spec.Bundle) {
			a.unpinBundle(spec.Bundle, jr.Name)
		}
		return submitError("submit job "+jr.Name, err)
	}
	return localapi.Response{JobID: jr.Name, Warning: oversizeWarning(c.State(), gpus)}
}

// oversizeWarning says when no active node of the cluster has as many
// GPUs as a job asks for: it is accepted (a bigger node may join) but
// waits, with that as its pending reason.
func oversizeWarning(st *state.State, gpus int) string {
	largest, active := 0, 0
	for _, n := range st.Nodes {
		if n.State == state.NodeActive {
			largest, active = max(largest, n.GPUs), active+1
		}
	}
	if active == 0 || gpus <= largest {
		return ""
	}
	return fmt.Sprintf("no node of the cluster has %d GPUs (the largest has %d): the job waits until one joins", gpus, largest)
}

// jobInfos lists the catalogue's jobs, sorted by ID.
// jobStory is one job's story from the replicated state.
func jobStory(st *state.State, id policy.JobID) *localapi.JobStory {
	j := st.Jobs[id]
	var info localapi.JobInfo
	for _, ji := range jobInfos(st) {
		if ji.ID == string(id) {
			info = ji
		}
	}
	s := &localapi.JobStory{JobInfo: info, Owner: j.Owner, Env: j.Spec.Env, Dir: j.Spec.Dir, GPUs: j.GPUs, VRAM: j.VRAM,
		Capability: j.Capability, LossBudget: j.LossBudget, Signal: j.Spec.Signal, Grace: j.Spec.Grace,
		Memory: j.Spec.Memory, CPUs: j.Spec.CPUs, Events: []localapi.JobEvent{}, Checkpoints: []localapi.CheckpointInfo{}}
	for _, e := range j.Events {
		s.Events = append(s.Events, localapi.JobEvent{At: e.At, Kind: string(e.Kind), Node: string(e.Node), From: string(e.From),
			Version: e.Version, Detail: e.Detail})
	}
	for _, cp := range st.Checkpoints[id] {
		ci := localapi.CheckpointInfo{Version: cp.Version, Bytes: cp.Size, Source: string(cp.Source), Committed: cp.Committed,
			CommittedAt: cp.CommittedAt, Holders: []string{}}
		for _, h := range cp.Holders {
			ci.Holders = append(ci.Holders, string(h))
		}
		s.Checkpoints = append(s.Checkpoints, ci)
	}
	for _, x := range j.FailureLog {
		s.FailureLog = append(s.FailureLog, exitInfo(x))
	}
	s.Moves = view.JobMoves(st, id)
	return s
}

func exitInfo(x state.JobExit) localapi.JobExit {
	return localapi.JobExit{Node: string(x.Node), At: x.At, ExitCode: x.ExitCode, Signal: x.Signal,
		Reason: x.Reason, Description: x.Describe(), LogTail: slices.Clone(x.LogTail)}
}

func jobInfos(st *state.State) []localapi.JobInfo {
	intervals := map[policy.JobID]policy.JobDecision{}
	for _, d := range st.Decisions.Jobs {
		intervals[d.Job] = d
	}
	out := []localapi.JobInfo{}
	for id, j := range st.Jobs {
		ji := localapi.JobInfo{ID: string(id), State: j.StateName(), UnderWay: st.UnderWay(id), Node: string(j.Node), Command: j.Spec.Command,
			Restarts: j.Restarts, RestartTime: j.RestartTime, Submitted: j.Submitted, Reason: st.PendingReason(id),
			Failures: j.Failures, MaxFailures: j.MaxFailures, EndedAt: j.End.At, CancelledBy: j.End.By, BundleSize: j.Spec.BundleSize, Owner: j.Owner}
		if x := j.LastExit; x != nil {
			e := exitInfo(*x)
			ji.LastExit = &e
			if cp, until, ok := st.Results(id); ok {
				ji.KeptUntil = until
				for _, h := range cp.Holders {
					ji.ResultsOn = append(ji.ResultsOn, string(h))
				}
			}
		}
		if d, ok := intervals[id]; ok {
			ji.Interval, ji.Standby = d.Interval, string(d.Standby)
			ji.BudgetUnmet = d.Ceiling > 0 && d.Floor > d.Ceiling
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
func (a *Agent) jobLog(c *raft.Coordinator, job string, tail int64) localapi.Response {
	if job == "" {
		return localapi.Response{Error: "logs: no job", Kind: localapi.KindBadRequest}
	}
	if err := localapi.ValidJobName(job); err != nil {
		return localapi.Response{Error: "logs: " + err.Error(), Kind: localapi.KindBadRequest}
	}
	j, ok := c.Store().Job(policy.JobID(job))
	if !ok {
		return localapi.Response{Error: fmt.Sprintf("no job %q", job), Kind: localapi.KindUnknownJob}
	}
	path := JobLogPath(a.cfg.DataDir, job)
	f, err := os.Open(path)
	if err != nil {
		if j.Node != "" && string(j.Node) != a.cfg.Name {
			return localapi.Response{Error: fmt.Sprintf("job %s runs on node %s: run 'reclaimnet logs %s' there", job, j.Node, job), Kind: localapi.KindElsewhere, Node: string(j.Node)}
		}
		if errors.Is(err, os.ErrNotExist) {
			return localapi.Response{Error: fmt.Sprintf("job %s (%s) has no log on this node yet", job, j.State), Kind: localapi.KindElsewhere, Node: string(j.Node)}
		}
		return localapi.Response{Error: fmt.Sprintf("read log: %v", err), Kind: localapi.KindInternal}
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
		return localapi.Response{Error: fmt.Sprintf("read log: %v", err), Kind: localapi.KindInternal}
	}
	resp := localapi.Response{JobID: job, Log: string(b), Node: a.cfg.Name}
	if j.Node != "" && string(j.Node) != a.cfg.Name {
		resp.Note = fmt.Sprintf("job %s now runs on node %s; this is the log of its run here", job, j.Node)
	}
	return resp
}

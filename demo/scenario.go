package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/web"
)

// observe polls the cluster's status (from one live node) and the job's
// output on every node once a second until ctx ends, turning changes into
// timeline events.
func (r *run) observe(ctx context.Context, wg *sync.WaitGroup) {
	d := newDiffer()
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Four times a second: decisions such as a recovery placement last
		// only until the job runs again (often under a second).
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			r.pollLogs()
			r.pollStatus(ctx, d)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (r *run) pollLogs() {
	for _, n := range r.agents.Names() {
		r.mu.Lock()
		l := r.logs[n]
		if l == nil {
			l = &jobLog{path: filepath.Join(r.agents.DataDir(n), "jobs", JobName, "run", "job.log")}
			r.logs[n] = l
		}
		evs := l.poll(n)
		var opened []*Segment
		if len(evs) > 0 {
			// Each event opened one segment: the last len(evs) are new.
			opened = l.segs[len(l.segs)-len(evs):]
			r.segs = append(r.segs, opened...)
		}
		r.mu.Unlock()
		for _, s := range opened {
			step := s.Restored
			if step < 0 {
				r.tl.add(Event{Kind: KindResume, Node: n, Job: JobName, Step: &step,
					Text: fmt.Sprintf("%s started on %s from step 0 (its own output, job.log)", JobName, n)})
				continue
			}
			r.tl.add(Event{Kind: KindResume, Node: n, Job: JobName, Step: &step,
				Text: fmt.Sprintf("%s resumed on %s at step %d: it restored the checkpoint of step %d, the steps before it are kept", JobName, n, step, step)})
		}
	}
}

func (r *run) pollStatus(ctx context.Context, d *differ) {
	node := r.pickObserver()
	if node == "" {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := r.agents.Status(sctx, node)
	if err != nil {
		r.log.Debug("status", "node", node, "err", err)
		r.mu.Lock()
		if r.observer == node {
			r.observer = ""
		}
		r.mu.Unlock()
		return
	}
	d.diff(&st, r.tl.add)
	r.mu.Lock()
	r.status = &st
	r.mu.Unlock()
}

// pickObserver keeps the current observer while it runs and is not about
// to be reclaimed, else takes the first such node.
func (r *run) pickObserver() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.agents == nil {
		return ""
	}
	if r.observer != "" && !r.avoid[r.observer] && r.agents.Running(r.observer) {
		return r.observer
	}
	r.observer = ""
	for _, n := range r.agents.Names() {
		if !r.avoid[n] && r.agents.Running(n) {
			r.observer = n
			break
		}
	}
	return r.observer
}

// proxyTarget is the node the status page shows: the leader while it runs
// and is not being reclaimed, else the observer.
func (r *run) proxyTarget() (string, string) {
	r.mu.Lock()
	if r.agents == nil {
		r.mu.Unlock()
		return "", ""
	}
	node := ""
	if r.status != nil {
		if l := string(r.status.Cluster.Leader); l != "" && !r.avoid[l] && r.agents.Running(l) {
			node = l
		}
	}
	r.mu.Unlock()
	if node == "" {
		node = r.pickObserver()
	}
	if node == "" {
		return "", ""
	}
	return node, r.agents.HTTPAddr(node)
}

// dial reaches a node for the status proxy (inside its namespace).
func (r *run) dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	a := r.agents
	r.mu.Unlock()
	if a == nil {
		return nil, errors.New("the campus is not up yet")
	}
	return a.Dial(ctx, node, network, addr)
}

func (r *run) avoidNode(n string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.avoid[n] = true
}

// segmentOn returns a copy of the latest segment on node (nil: none).
func (r *run) segmentOn(node string) *Segment {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.segs) - 1; i >= 0; i-- {
		if r.segs[i].Node == node {
			s := *r.segs[i]
			s.Checkpoints = slices.Clone(s.Checkpoints)
			return &s
		}
	}
	return nil
}

func findJob(st *web.Status) *web.Job {
	if st == nil {
		return nil
	}
	for i := range st.Jobs {
		if st.Jobs[i].ID == JobName {
			return &st.Jobs[i]
		}
	}
	return nil
}

func heldOffNode(c *web.Checkpoint, node policy.NodeID) bool {
	return c != nil && slices.ContainsFunc(c.Holders, func(h policy.NodeID) bool { return h != node })
}

// waitFor polls cond against the latest status until it holds; the error
// says what was still missing.
func (r *run) waitFor(ctx context.Context, within time.Duration, what string, cond func(st *web.Status) (bool, string)) error {
	deadline := time.Now().Add(within)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	why := "no status yet"
	lastWhy, lastSaid := "", time.Now()
	for {
		r.mu.Lock()
		st := r.status
		r.mu.Unlock()
		if st != nil {
			ok, w := cond(st)
			if ok {
				return nil
			}
			why = w
		}
		// Say what we are waiting for when it has not changed for a while.
		if why != lastWhy {
			lastWhy, lastSaid = why, time.Now()
		} else if time.Since(lastSaid) > 20*time.Second {
			r.tl.addf(KindDemo, "", JobName, "still waiting for %s: %s", what, why)
			lastSaid = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %s: not within %v: %s", what, within, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// pendingWhy explains a job that is not running yet from the decisions.
func pendingWhy(st *web.Status) string {
	for _, d := range st.Decisions {
		if d.Placement != nil && d.Placement.Job == JobName {
			return "placed on " + string(d.Placement.To) + ", starting"
		}
	}
	return "no placement yet (P2 finds no node: see the status page's decisions; a busy host's load above θ=0.8 rejects every node)"
}

// scenario runs the job through a scheduled and an emergency reclaim.
func (r *run) scenario(ctx context.Context) error {
	ag := r.agents
	names := ag.Names()
	cmd, hint := r.jobCommand()
	submit := names[0]
	args := append([]string{"run", "--name", JobName, "--workdir", r.bundleDir, "--loss-budget", "5s", "--grace", "10s", "--size-hint", hint, "--runtime-hint", "2h", "--"}, cmd...)
	r.tl.addf(KindDemo, submit, JobName, "submitting the %s job: reclaimnet run --name %s --workdir %s (its bundle) --loss-budget 5s (a short budget: checkpoints every ~10 s) -- %s",
		r.res.JobKind, JobName, r.bundleDir, shortCommand(cmd))
	if _, err := ag.CLI(ctx, submit, args...); err != nil {
		return fmt.Errorf("demo: submit the job: %w", err)
	}

	// 1. The job runs and has a checkpoint held by another node.
	var x string
	err := r.waitFor(ctx, 4*time.Minute, "the job to run and commit a checkpoint held off its node", func(st *web.Status) (bool, string) {
		j := findJob(st)
		switch {
		case j == nil:
			return false, "the job is not in the replicated state yet"
		case j.State != "running" || j.Node == "":
			return false, "job " + j.State + ": " + pendingWhy(st)
		case !heldOffNode(j.LastCheckpoint, j.Node):
			return false, "running on " + string(j.Node) + ", no checkpoint held by another node yet"
		}
		if s := r.segmentOn(string(j.Node)); s == nil || s.LastStep < 0 {
			return false, "running on " + string(j.Node) + ", no step in its output yet"
		}
		x = string(j.Node)
		r.res.Sandbox = st.Sandbox.Summary
		return true, ""
	})
	if err != nil {
		return err
	}
	r.tl.addf(KindDemo, x, JobName, "how %s (like every node) runs the job: %s", x, r.res.Sandbox)

	// 2. Scheduled reclaim of x.
	notice := r.cfg.Notice
	r.avoidNode(x)
	command := "reclaimnet reclaim --notice " + notice.String()
	r.res.Scheduled = &Reclaim{Node: x, Command: command}
	r.tl.addf(KindDemo, x, "", "the owner of %s takes it back with notice: %s", x, command)
	announced := time.Now()
	// --detach: the demo follows the reclaim through the cluster's status.
	out, err := ag.CLI(ctx, x, "reclaim", "--notice", notice.String(), "--detach")
	if err != nil {
		return fmt.Errorf("demo: scheduled reclaim: %w", err)
	}
	r.tl.addf(KindDemo, x, "", "%s says: %s", x, oneLine(out))
	var y string
	var handoffVersion uint64
	err = r.waitFor(ctx, notice+2*time.Minute, "the job to resume on another node", func(st *web.Status) (bool, string) {
		j := findJob(st)
		if j == nil || j.State != "running" || j.Node == "" || string(j.Node) == x {
			state := "missing"
			if j != nil {
				state = j.State + onNode(j.Node)
			}
			return false, "job " + state
		}
		s := r.segmentOn(string(j.Node))
		if s == nil || s.Restored < 0 || s.LastStep <= s.Restored {
			return false, "placed on " + string(j.Node) + ", not stepping there yet"
		}
		y = string(j.Node)
		if j.LastCheckpoint != nil {
			handoffVersion = j.LastCheckpoint.Version
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	r.res.Scheduled.To = y
	r.tl.addf(KindDemo, x, "", "%s keeps its place in the cluster until the deadline (the owner gave %s notice); waiting for it to leave", x, notice)
	select {
	case <-ag.Exited(x):
	case <-time.After(time.Until(announced.Add(notice + nowGrace))):
		r.tl.addf(KindDemo, x, "", "%s's agent is still running %s after its deadline (stuck shutting down; see %s): the demo pulls the plug (SIGKILL)",
			x, nowGrace, ag.LogPath(x))
		if err := ag.Kill(x); err != nil {
			return fmt.Errorf("demo: kill the hung agent of %s: %w", x, err)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if out, err := ag.CLI(ctx, x, "reclaim", "--status", "--json"); err == nil {
		r.res.Scheduled.Report = decodeReport(out)
	}
	r.tl.addf(KindReclaim, x, "", "%s", reportText(r.res.Scheduled.Report, x))

	// 3. A fresh checkpoint of the job on y, held off y.
	err = r.waitFor(ctx, 2*time.Minute, "a checkpoint of the job on "+y+" held off "+y, func(st *web.Status) (bool, string) {
		j := findJob(st)
		if j == nil || string(j.Node) != y {
			return false, "job not on " + y
		}
		if c := j.LastCheckpoint; c == nil || c.Version <= handoffVersion || !heldOffNode(c, j.Node) {
			return false, fmt.Sprintf("no version after v%d committed off %s yet", handoffVersion, y)
		}
		return true, ""
	})
	if err != nil {
		return err
	}

	// 4. Emergency reclaim of y.
	r.avoidNode(y)
	command = "reclaimnet reclaim --now"
	r.res.Emergency = &Reclaim{Node: y, Command: command}
	r.tl.addf(KindDemo, y, "", "the owner of %s needs it NOW: %s (kill-switch first, by the command itself; the agent leaves without waiting)", y, command)
	rep, err := r.reclaimNow(ctx, y)
	if err != nil {
		return err
	}
	r.res.Emergency.Report = rep
	r.tl.addf(KindReclaim, y, "", "%s", reportText(rep, y))
	var z string
	err = r.waitFor(ctx, 3*time.Minute, "the job to recover on a third node", func(st *web.Status) (bool, string) {
		j := findJob(st)
		if j == nil || j.State != "running" || j.Node == "" || string(j.Node) == x || string(j.Node) == y {
			state := "missing"
			if j != nil {
				state = j.State + onNode(j.Node)
			}
			return false, "job " + state + " (failure detection, then recovery from the freshest committed replica)"
		}
		s := r.segmentOn(string(j.Node))
		if s == nil || s.Restored < 0 || s.LastStep < s.Restored+3 {
			return false, "placed on " + string(j.Node) + ", not stepping there yet"
		}
		z = string(j.Node)
		return true, ""
	})
	if err != nil {
		return err
	}
	r.res.Emergency.To = z
	return nil
}

// nowGrace is how long the demo lets an agent take to exit after
// `reclaim --now` before it pulls the plug (the agent normally exits within
// a second or two).
const nowGrace = 20 * time.Second

// reclaimNow runs `reclaim --now` on node and returns the owner's report.
// An agent that has not exited nowGrace after the command is killed (as
// an owner pulling the plug would), and the timeline says so: a hung agent
// would keep gossiping "alive", and the cluster would never recover its jobs.
func (r *run) reclaimNow(ctx context.Context, node string) (*localapi.ReclaimReport, error) {
	ag := r.agents
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := ag.CLI(cctx, node, "reclaim", "--now", "--json")
		done <- result{out, err}
	}()
	select {
	case <-ag.Exited(node):
	case <-time.After(nowGrace):
		r.tl.addf(KindDemo, node, "", "%s's agent has not exited %s after reclaim --now (it is stuck shutting down; see %s): the demo pulls the plug (SIGKILL)",
			node, nowGrace, ag.LogPath(node))
		if err := ag.Kill(node); err != nil {
			return nil, fmt.Errorf("demo: kill the hung agent of %s: %w", node, err)
		}
		// The command waits for the agent's info file, which a killed agent
		// never removes: its report is the one the agent stored.
		time.Sleep(time.Second)
		cancel()
		<-done
		rep, err := localapi.ReadReport(ag.DataDir(node))
		if err != nil {
			r.log.Warn("owner's report", "node", node, "err", err)
		}
		return rep, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := <-done
	if res.err != nil {
		return nil, fmt.Errorf("demo: emergency reclaim: %w", res.err)
	}
	return decodeReport(res.out), nil
}

func reportText(rep *localapi.ReclaimReport, node string) string {
	if rep == nil {
		return "no owner's report from " + node + " (see its log)"
	}
	kind := "scheduled"
	if rep.Emergency {
		kind = "emergency"
	}
	iso := "- (kernel enforcement off: nothing to isolate)"
	if rep.Isolated {
		iso = rep.Isolate.String() + " (kill-switch flip)"
	}
	return fmt.Sprintf("owner's report for the %s reclaim of %s: time to isolate %s; moved %v; degraded %v; bytes sent %s; machine used for %s after the command",
		kind, rep.Node, iso, rep.Moved, rep.Degraded, bytesText(rep.BytesSent), rep.UsedFor.Round(time.Millisecond))
}

func shortCommand(cmd []string) string {
	out := make([]string, len(cmd))
	for i, c := range cmd {
		if strings.Contains(c, string(filepath.Separator)) && i > 0 {
			c = ".../" + filepath.Base(c)
		}
		out[i] = c
	}
	return strings.Join(out, " ")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// summary prints where the job ran and what each reclaim cost it.
func (r *run) summary() {
	w := r.cfg.Out
	r.mu.Lock()
	segs := make([]Segment, len(r.segs))
	for i, s := range r.segs {
		segs[i] = *s
	}
	r.mu.Unlock()
	fmt.Fprintf(w, "\nWhat happened to job %s (from its own output on each node):\n", JobName)
	for i, s := range segs {
		how := "started from scratch"
		if s.Restored >= 0 {
			how = fmt.Sprintf("resumed at step %d", s.Restored)
		}
		fmt.Fprintf(w, "  %-4s steps %d..%d  %s", s.Node, max(s.FirstStep, 0), s.LastStep, how)
		if i > 0 && s.Restored >= 0 {
			p := segs[i-1]
			switch {
			case slices.Contains(p.Checkpoints, s.Restored) && r.res.Scheduled != nil && p.Node == r.res.Scheduled.Node:
				fmt.Fprintf(w, ": the final checkpoint %s wrote when its owner reclaimed it; %d step(s) after it redone", p.Node, max(p.LastStep+1-s.Restored, 0))
			case slices.Contains(p.Checkpoints, s.Restored):
				fmt.Fprintf(w, ": the freshest checkpoint of %s that another node held; the %d step(s) %s did after it were lost in the emergency", p.Node, max(p.LastStep+1-s.Restored, 0), p.Node)
			default:
				fmt.Fprintf(w, ": a checkpoint from before %s", p.Node)
			}
		}
		fmt.Fprintln(w)
	}
	if r.res.Scheduled != nil {
		fmt.Fprintf(w, "Scheduled reclaim of %s (%s): the job moved to %s.\n", r.res.Scheduled.Node, r.res.Scheduled.Command, r.res.Scheduled.To)
	}
	if r.res.Emergency != nil {
		fmt.Fprintf(w, "Emergency reclaim of %s (%s): the job recovered on %s.\n", r.res.Emergency.Node, r.res.Emergency.Command, r.res.Emergency.To)
	}
}

package demo

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/web"
)

// Event kinds of the timeline.
const (
	KindDemo       = "demo"       // what the demo itself does (an owner's command, a wait)
	KindCluster    = "cluster"    // members, leader
	KindJob        = "job"        // a job's state or node changed
	KindPlacement  = "placement"  // P2 placed a job (new or recovering)
	KindInterval   = "interval"   // P1 chose a checkpoint interval
	KindCheckpoint = "checkpoint" // a checkpoint version was committed (held off-node)
	KindHandoff    = "handoff"    // a hand-off was planned for a reclaim
	KindReclaim    = "reclaim"    // a reclaim was announced, finished or reported
	KindResume     = "resume"     // the job's own output: it resumed (or started)
)

// Event is one line of the timeline.
type Event struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	Node string    `json:"node,omitempty"`
	Job  string    `json:"job,omitempty"`
	// Step is the step a resume started at (KindResume; -1 from scratch).
	Step *int64 `json:"step,omitempty"`
	// Version is the checkpoint version (KindCheckpoint).
	Version uint64 `json:"version,omitempty"`
	// Text is the human line: what happened and why.
	Text string `json:"text"`
}

// timeline collects events and prints each as it arrives.
type timeline struct {
	start time.Time
	out   io.Writer // human lines; nil: none

	mu     sync.Mutex
	events []Event
}

func (t *timeline) add(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, e)
	if t.out != nil {
		fmt.Fprintf(t.out, "[%6.1fs] %-10s %s\n", e.At.Sub(t.start).Seconds(), e.Kind, e.Text)
	}
}

func (t *timeline) addf(kind, node, job, format string, args ...any) {
	t.add(Event{Kind: kind, Node: node, Job: job, Text: fmt.Sprintf(format, args...)})
}

func (t *timeline) snapshot() []Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.events)
}

// differ turns two consecutive status documents into timeline events: the
// explanation comes from the agents' own state (the decisions with their
// candidates and reasons, the checkpoint catalogue, the owner's reports).
type differ struct {
	prev     *web.Status
	handoffs map[string]bool // reported hand-off decisions
	places   map[string]bool // reported placements
	history  map[string]bool // reported reclaim records
	interval map[policy.JobID]time.Duration
	// explained: jobs whose move to a node a decision event explained
	// ("job|node").
	explained map[string]bool
	lastNode  map[policy.JobID]policy.NodeID // where each job last had a node
	leader    policy.NodeID                  // the last leader seen
}

func newDiffer() *differ {
	return &differ{handoffs: map[string]bool{}, places: map[string]bool{}, history: map[string]bool{},
		interval: map[policy.JobID]time.Duration{}, explained: map[string]bool{},
		lastNode: map[policy.JobID]policy.NodeID{}}
}

func (d *differ) diff(cur *web.Status, emit func(Event)) {
	at := cur.GeneratedAt
	ev := func(kind, node, job, format string, args ...any) {
		emit(Event{At: at, Kind: kind, Node: node, Job: job, Text: fmt.Sprintf(format, args...)})
	}
	prev := d.prev
	d.prev = cur
	defer func() {
		if cur.Cluster.Leader != "" {
			d.leader = cur.Cluster.Leader
		}
	}()
	if prev == nil {
		var names []string
		for _, m := range cur.Cluster.Members {
			names = append(names, fmt.Sprintf("%s(%s)", m.ID, m.Building))
		}
		ev(KindCluster, string(cur.Cluster.Leader), "", "cluster formed: %d members %s; Raft leader %s",
			len(cur.Cluster.Members), strings.Join(names, " "), cur.Cluster.Leader)
	} else {
		// A moment without a leader (an election) is not news; a new one is.
		if l := cur.Cluster.Leader; l != "" && l != d.leader {
			ev(KindCluster, string(l), "", "Raft leader is now %s (was %s)", l, d.leader)
		}
		for _, m := range cur.Cluster.Members {
			i := slices.IndexFunc(prev.Cluster.Members, func(p web.Member) bool { return p.ID == m.ID })
			switch {
			case i < 0:
				ev(KindCluster, string(m.ID), "", "%s joined (%s)", m.ID, m.State)
			case prev.Cluster.Members[i].State != m.State:
				ev(KindCluster, string(m.ID), "", "%s is %s (was %s)%s", m.ID, m.State, prev.Cluster.Members[i].State, memberWhy(m.State))
			}
		}
	}
	for _, p := range cur.Reclaims.Pending {
		if prev != nil && slices.ContainsFunc(prev.Reclaims.Pending, func(q web.PendingReclaim) bool { return q.Reclaim == p.Reclaim }) {
			continue
		}
		if p.Emergency {
			ev(KindReclaim, string(p.Reclaim.Node), "", "emergency reclaim of %s recorded: no notice; its jobs %v recover from their freshest committed replicas",
				p.Reclaim.Node, p.Jobs)
		} else {
			ev(KindReclaim, string(p.Reclaim.Node), "", "reclaim of %s announced: it leaves at %s (notice %s); jobs to hand off: %v",
				p.Reclaim.Node, p.Reclaim.Deadline.UTC().Format("15:04:05"), p.Reclaim.Deadline.Sub(p.Reclaim.Announced).Round(time.Second), p.Jobs)
		}
	}
	for _, dec := range cur.Decisions {
		switch {
		case dec.Handoff != nil:
			h := dec.Handoff
			key := fmt.Sprintf("%s|%s|%s|%t|%t", h.Job, h.From, h.To, h.FinalCheckpoint, h.Degraded)
			if !d.handoffs[key] {
				d.handoffs[key] = true
				d.explained[string(h.Job)+"|"+string(h.To)] = true
				ev(KindHandoff, string(h.From), string(h.Job), "%s", handoffText(h))
			}
		case dec.Placement != nil:
			p := dec.Placement
			key := fmt.Sprintf("%s|%s|%s|%t", p.Job, p.To, p.From, p.Recovery)
			if !d.places[key] {
				d.places[key] = true
				d.explained[string(p.Job)+"|"+string(p.To)] = true
				ev(KindPlacement, string(p.To), string(p.Job), "%s", placementText(p, startedFrom(cur, p.Job, p.To)))
			}
		}
	}
	for _, j := range cur.Jobs {
		var pj *web.Job
		if prev != nil {
			if i := slices.IndexFunc(prev.Jobs, func(x web.Job) bool { return x.ID == j.ID }); i >= 0 {
				pj = &prev.Jobs[i]
			}
		}
		switch {
		case pj == nil:
			ev(KindJob, string(j.Node), string(j.ID), "job %s submitted: %s%s", j.ID, j.State, onNode(j.Node))
		case pj.State != j.State || pj.Node != j.Node:
			ev(KindJob, string(j.Node), string(j.ID), "job %s %s%s (was %s%s)", j.ID, j.State, onNode(j.Node), pj.State, onNode(pj.Node))
		}
		if j.Node != "" {
			last := d.lastNode[j.ID]
			if key := string(j.ID) + "|" + string(j.Node); last != "" && last != j.Node && !d.explained[key] {
				// The decision came and went between two looks (a recovery
				// placement lasts only until the job runs again): say what
				// the durable state shows.
				d.explained[key] = true
				ev(KindPlacement, string(j.Node), string(j.ID), "%s", inferredMoveText(last, pj, &j, startedFrom(cur, j.ID, j.Node)))
			}
			d.lastNode[j.ID] = j.Node
		}
		if j.Decision != nil && j.Decision.Interval > 0 {
			old := d.interval[j.ID]
			if old == 0 || math.Abs(float64(j.Decision.Interval-old)) > 0.25*float64(old) {
				d.interval[j.ID] = j.Decision.Interval
				ev(KindInterval, string(j.Node), string(j.ID), "%s", intervalText(j))
			}
		}
		if c := j.LastCheckpoint; c != nil && (pj == nil || pj.LastCheckpoint == nil || pj.LastCheckpoint.Version != c.Version) {
			emit(Event{At: at, Kind: KindCheckpoint, Node: string(j.Node), Job: string(j.ID), Version: c.Version,
				Text: fmt.Sprintf("%s checkpoint v%d committed: %s, held by %s (recoverable once off its node)",
					j.ID, c.Version, bytesText(c.Bytes), joinIDs(c.Holders))})
		}
		if j.Standby != "" && (pj == nil || pj.Standby != j.Standby) {
			ev(KindJob, string(j.Standby), string(j.ID), "%s standby is %s: background pre-sync sends it each checkpoint, so a hand-off there moves only a delta",
				j.ID, j.Standby)
		}
	}
	for _, r := range cur.Reclaims.History {
		key := fmt.Sprintf("%s|%s|%s", r.Reclaim.Node, r.Reclaim.Announced.Format(time.RFC3339Nano), r.Released.Format(time.RFC3339Nano))
		if d.history[key] {
			continue
		}
		d.history[key] = true
		ev(KindReclaim, string(r.Reclaim.Node), "", "%s", historyText(r))
	}
}

func memberWhy(s web.MemberState) string {
	switch s {
	case web.MemberLeaving:
		return ": a reclaim is pending, it takes no new work"
	case web.MemberLeft:
		return ": it left gracefully"
	case web.MemberDead:
		return ": failure detection gave up on it"
	case web.MemberSuspect:
		return ": it stopped answering gossip probes"
	}
	return ""
}

func onNode(n policy.NodeID) string {
	if n == "" {
		return ""
	}
	return " on " + string(n)
}

func joinIDs(ids []policy.NodeID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	if len(s) == 0 {
		return "nobody yet"
	}
	return strings.Join(s, ",")
}

func bytesText(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// rateText shows a rate in bytes/s in Mbit/s, as the status page does
// (sizes are binary, rates the network's bits).
func rateText(bps float64) string {
	if bps <= 0 || bps >= math.MaxFloat64/2 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f Mbit/s", bps*8/1e6)
}

func intervalText(j web.Job) string {
	dd := j.Decision
	if dd.Interval == policy.RescueInterval {
		// An order, not an interval (policy.RescueInterval).
		return fmt.Sprintf("P1: %s checkpoints now: a last chance before its node leaves, or the work it would lose if its node left now "+
			"is already past its interval (its copy off the node is gone); checkpoint bandwidth %s", j.ID, rateText(dd.Bandwidth))
	}
	why := fmt.Sprintf("sqrt(2C/(λ·b)) with C %s, λ̂⁺ %.3g/h, b %s", bytesText(j.CheckpointBytes), dd.Hazard*3600, rateText(dd.Bandwidth))
	if j.LossBudget > 0 && dd.Interval >= 2*j.LossBudget-time.Second/10 {
		why = fmt.Sprintf("capped at 2·Lmax: the loss budget is %s (the optimum for λ̂⁺ %.3g/h is far longer)", j.LossBudget, dd.Hazard*3600)
	}
	if dd.LossBudgetInfeasible {
		why += "; the network cannot checkpoint often enough for the loss budget (P1.5 flag)"
	}
	return fmt.Sprintf("P1: %s checkpoints every %s (%s); checkpoint bandwidth %s", j.ID, dd.Interval.Round(time.Second/10), why, rateText(dd.Bandwidth))
}

// candidatesText lists the best scored candidates and the rejected ones
// with their reasons (docs/design.md P2).
func candidatesText(cs []web.Candidate) string {
	var scored, rejected []string
	for _, c := range cs {
		if c.Rejected != "" {
			rejected = append(rejected, fmt.Sprintf("%s %s", c.Node, c.Rejected))
			continue
		}
		if len(scored) < 3 {
			scored = append(scored, fmt.Sprintf("%s σ=%.2fs (transfer %s, survival %.3f)", c.Node, c.Score, c.Transfer.Round(time.Millisecond), c.Survival))
		}
	}
	s := ""
	if len(scored) > 0 {
		s = "ranked: " + strings.Join(scored, ", ")
	}
	if len(rejected) > 0 {
		if s != "" {
			s += "; "
		}
		s += "rejected: " + strings.Join(rejected, ", ")
	}
	return s
}

func handoffText(h *web.Handoff) string {
	if !h.Admitted() {
		return strings.TrimSpace(fmt.Sprintf("hand-off of %s from %s infeasible, decided now rather than at the deadline: %s; it will recover from its freshest committed replica after %s leaves. %s",
			h.Job, h.From, h.Reason, h.From, candidatesText(h.Candidates)))
	}
	final := "no zero-loss final checkpoint fits (P1.6): the freshest committed version moves"
	if h.FinalCheckpoint {
		final = "a final checkpoint fits in the notice (P1.6): zero work lost"
	}
	return strings.TrimSpace(fmt.Sprintf("hand-off planned %s → %s: %s; the destination lacks %s of it; must finish by %s. %s",
		h.From, h.To, final, bytesText(h.Bytes), h.Deadline.UTC().Format("15:04:05"), candidatesText(h.Candidates)))
}

// startedFrom is the cluster's record of the version job started from on
// node to: the reclaim history's newest outcome for the job (the version
// its new node restores, which the state machine wrote when it applied
// the placement or the hand-off), when it put the job on to; nil when the
// job's newest outcome is another move or names no version.
func startedFrom(s *web.Status, job policy.JobID, to policy.NodeID) *web.ReclaimOutcome {
	for _, r := range s.Reclaims.History { // newest first
		for i, o := range r.Jobs {
			if o.Job != job {
				continue
			}
			if o.To == to && o.Version > 0 {
				return &r.Jobs[i]
			}
			return nil
		}
	}
	return nil
}

// restoredText names the version a job restored, from its outcome, or
// what the caller knows of it without one.
func restoredText(o *web.ReclaimOutcome, otherwise string) string {
	switch {
	case o == nil:
		return otherwise
	case o.Replica != "":
		return fmt.Sprintf("its committed checkpoint v%d from the replica on %s", o.Version, o.Replica)
	}
	return fmt.Sprintf("its checkpoint v%d", o.Version)
}

func placementText(p *web.Placement, o *web.ReclaimOutcome) string {
	return strings.TrimSpace(placementLine(p, o))
}

func placementLine(p *web.Placement, o *web.ReclaimOutcome) string {
	switch {
	case p.Recovery && p.From != "":
		return fmt.Sprintf("recovery: %s restarts on %s from %s, pushed by %s (P2 without a deadline). %s",
			p.Job, p.To, restoredText(o, "the freshest committed replica"), p.From, candidatesText(p.Candidates))
	case p.Recovery:
		return fmt.Sprintf("recovery: no replica of %s survives; it restarts from the beginning on %s. %s", p.Job, p.To, candidatesText(p.Candidates))
	}
	return fmt.Sprintf("placement: %s goes to %s (P2). %s", p.Job, p.To, candidatesText(p.Candidates))
}

// inferredMoveText explains a move no decision event explained. The
// version it names is the one the job started from (o, the cluster's
// record); the freshest committed version of the previous look is only a
// guess, since a newer one may have committed between the two looks.
func inferredMoveText(from policy.NodeID, prev, cur *web.Job, o *web.ReclaimOutcome) string {
	ckpt := restoredText(o, "its freshest committed checkpoint")
	if o == nil && prev != nil && prev.LastCheckpoint != nil {
		ckpt = fmt.Sprintf("its freshest committed checkpoint (v%d or newer)", prev.LastCheckpoint.Version)
	}
	if prev != nil && prev.State == "migrating" {
		return fmt.Sprintf("hand-off: %s moved %s → %s with %s; the hand-off decision was made and carried out between two looks at the cluster",
			cur.ID, from, cur.Node, ckpt)
	}
	return fmt.Sprintf("recovery: %s restarted on %s from %s after %s was lost; P2's placement was decided and carried out between two looks at the cluster",
		cur.ID, cur.Node, ckpt, from)
}

func historyText(r web.ReclaimRecord) string {
	kind := "scheduled"
	if r.Emergency {
		kind = "emergency"
	}
	var jobs []string
	for _, o := range r.Jobs {
		s := string(o.Job)
		switch {
		case o.Degraded:
			s += " degraded (" + o.Reason + ")"
		case o.To != "":
			s += " moved to " + string(o.To)
		}
		if o.FinalCheckpoint {
			s += " with a final checkpoint"
		}
		if o.WorkLost > 0 || o.Downtime > 0 {
			s += fmt.Sprintf(", work lost %s", o.WorkLost.Round(time.Millisecond))
		}
		switch {
		case o.Downtime > 0:
			s += fmt.Sprintf(", downtime %s", o.Downtime.Round(time.Millisecond))
		case o.Resuming:
			s += ", not running again yet"
		}
		jobs = append(jobs, s)
	}
	if len(jobs) == 0 {
		jobs = []string{"none listed"}
	}
	on := " (on time)"
	switch {
	case r.Emergency:
		on = "" // no notice, no deadline to meet
	case !r.OnTime:
		on = " (AFTER the deadline)"
	}
	rel := ""
	if !r.Released.IsZero() {
		rel = fmt.Sprintf(" released %s after the announcement%s;", r.Released.Sub(r.Reclaim.Announced).Round(time.Millisecond), on)
	}
	// The same words as the page's history: a record without the owner's
	// report is the cluster's own.
	what := "owner's report (replicated)"
	if !r.OwnerReport {
		what = "the cluster's record (the owner's report has not reached the cluster yet)"
	}
	return fmt.Sprintf("%s for the %s reclaim of %s:%s jobs: %s", what, kind, r.Reclaim.Node, rel, strings.Join(jobs, "; "))
}

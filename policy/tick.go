package policy

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Degraded-recovery reasons a HandoffDecision may carry.
const (
	ReasonEmergency     = "emergency reclaim: recover from the freshest committed replica"
	ReasonNoticeShort   = "notice not longer than the restart time"
	ReasonNoDestination = "no destination can receive the checkpoint before the deadline"
	ReasonNotAdmitted   = "migration not admitted: links full with earlier deadlines"
	ReasonTooSlow       = "path too slow for a final checkpoint before the deadline"
)

// burstWindow is how much of a flow's ceiling its token bucket may burst
// (10 ms), never below Params.MinBurst (docs/design.md P3.5).
const burstWindow = 10 * time.Millisecond

// CheckpointPrefix starts the ID of a job's periodic checkpoint (pre-sync)
// flow; HandoffPrefix that of a hand-off's migration flow.
const (
	CheckpointPrefix = "ckpt/"
	HandoffPrefix    = "mig/"
)

// migration is one planned or recovery transfer being decided this period.
type migration struct {
	id       string
	job      *Job
	from, to int
	bytes    int64
	start    time.Time
	deadline time.Time // zero for a recovery restore
	minRate  float64
	rate     float64
	links    []int
}

// Tick is the leader's control step (docs/design.md P1.9 and P3.4a), a pure function
// of the snapshot and now. In order:
//
//  1. Planned migrations. Jobs on nodes with a pending scheduled reclaim,
//     earliest deadline first: P2 picks a destination whose path still has
//     room for r_min at the ceiling (carried flows keep theirs), starts are
//     staggered within their slack (P3.4b), and P3 admits each flow at
//     r_min = C/(deadline − start − Tr) if every link of its path holds it
//     at its ceiling (P3.4, P3.4c). Admitted flows get a final-checkpoint
//     order (P1.6); the others are degraded recoveries.
//  2. Recoveries and placements. Jobs that lost their host (emergency
//     reclaim, gone node, state Recovering) are placed by P2 from their
//     freshest live replica and their restore flows, with the restores
//     of earlier periods still under way (carried flows, RestorePrefix),
//     share what is left of their paths max-min: a job that is down comes
//     before the durability of the running ones. Pending jobs are placed
//     by P2.6; a placement on a node that lacks the job's bundle gets a
//     bundle flow (BundlePrefix) from a holder, which shares what is
//     left the same way, with the bundle flows still under way.
//     A degraded scheduled hand-off gets a last-chance checkpoint when one
//     can land before the deadline (rescue.go); otherwise it is recovered
//     at once like a job that lost its host (its Placement has Recovery
//     set while the job still runs on the leaving node).
//  3. P1. Every running job keeps (or gets from P2.6) a standby; what is
//     left of each link is the checkpoint budget, split by the cube-root
//     rule with caps (P1.3/P1.4; on several bottlenecks each job gets its
//     weighted max-min share of its tightest link), and Δ_i follows from
//     P1.5.
//  4. What P1 could not use goes to the migrations of steps 1–2 by
//     max-min water-filling, so they finish early.
//
// Links are per direction; every flow is counted at its ceiling
// (CeilingFactor × rate) against each link's migration share, which is
// never negative. The output is sorted (jobs, hand-offs and placements by
// job ID, flows by ID), so the same input gives the same Decisions.
// Start Params from DefaultParams: the zero Params has every protocol
// switched off and a load threshold of 0.
func Tick(s Snapshot, now time.Time) Decisions {
	reclaims := map[NodeID]Reclaim{}
	for _, r := range s.Reclaims {
		// Several reclaims of one node: the earliest deadline counts, and
		// among equal deadlines the earliest announcement (the longest
		// notice), so input order never matters.
		if old, ok := reclaims[r.Node]; !ok || r.Deadline.Before(old.Deadline) ||
			r.Deadline.Equal(old.Deadline) && r.Announced.Before(old.Announced) {
			reclaims[r.Node] = r
		}
	}
	reclaimed := make(map[NodeID]bool, len(reclaims))
	for id := range reclaims {
		reclaimed[id] = true
	}
	w := newWorld(s, now, reclaimed)
	w.reclaims = reclaims

	jobs := make([]*Job, 0, len(s.Jobs))
	for i := range s.Jobs {
		if s.Jobs[i].State != JobDone {
			jobs = append(jobs, &s.Jobs[i])
		}
	}
	slices.SortStableFunc(jobs, func(a, b *Job) int { return cmp.Compare(a.ID, b.ID) })

	var d Decisions
	var recover, running []*Job
	var runningHost []int // host node index of each running job
	var handoffs []handoffReq
	carried := map[JobID]*Flow{}
	var pushing map[JobID]*Flow // periodic checkpoints in flight, when a node is reclaimed
	for i := range s.Flows {
		f := &s.Flows[i]
		switch {
		case f.Remaining <= 0:
		case f.Class == ClassMigration && !strings.HasPrefix(f.ID, BundlePrefix):
			if old, ok := carried[f.Job]; !ok || f.ID < old.ID {
				carried[f.Job] = f
			}
		case len(reclaims) > 0 && strings.HasPrefix(f.ID, CheckpointPrefix):
			if pushing == nil {
				pushing = map[JobID]*Flow{}
			}
			pushing[f.Job] = f
		}
	}
	for _, j := range jobs {
		host, hostOK := w.nodeIndex(j.Node)
		switch {
		case j.State == JobPending:
			continue // placed in step 2
		case j.State == JobRecovering || j.Node == "" || !hostOK:
			recover = append(recover, j)
		case reclaimed[j.Node]:
			r := reclaims[j.Node]
			if r.Emergency() {
				d.Handoffs = append(d.Handoffs, HandoffDecision{Job: j.ID, From: j.Node, Deadline: r.Deadline, Degraded: true, Reason: ReasonEmergency})
				recover = append(recover, j)
				continue
			}
			handoffs = append(handoffs, handoffReq{job: j, reclaim: r, carried: carried[j.ID], pushing: pushing[j.ID]})
		case w.nodes[host].Leaving:
			recover = append(recover, j) // the node left without a reclaim on record
		default:
			running = append(running, j)
			runningHost = append(runningHost, host)
		}
	}

	// Step 1: planned migrations, earliest deadline first.
	planned := w.handoffs(handoffs, &d)

	if !s.Params.Switches.P3 && len(planned) > 0 {
		// P3 off: no admission and no reservation; migrations simply
		// share the links max-min, ahead of checkpoints.
		w.share(planned)
	}

	// Step 2: recoveries from replicas (with the restores still under
	// way from earlier periods), then new jobs.
	restores := w.recoveries(recover, &d, false)
	restores = append(w.restoresInFlight(s.Flows, jobs), restores...)
	if len(restores) > 0 {
		w.share(restores)
	}
	// New jobs, and the bundles their nodes lack (with those still under
	// way), after the recoveries: a job that lost its host comes first.
	bundles := append(w.bundlesInFlight(s.Flows, jobs), w.placeNew(jobs, &d)...)
	if len(bundles) > 0 {
		w.share(bundles)
		restores = append(restores, bundles...)
	}

	// Last-chance checkpoints for the degraded scheduled hand-offs (in
	// step 1's deadline order).
	var degraded []handoffReq
	for _, h := range handoffs {
		for k := range d.Handoffs {
			if hd := &d.Handoffs[k]; hd.Job == h.job.ID && hd.Degraded {
				degraded = append(degraded, h)
			}
		}
	}
	rescued := w.rescues(degraded)
	// The others recover now, from their freshest committed replica,
	// while its holders (the leaving node included) are still up: waiting
	// for the deadline would only delay the restart and, when every
	// holder is leaving too, lose the copy (docs/design.md P1.6's degraded recovery,
	// decided early). The job is lost work either way: it stops now.
	if early := unrescued(degraded, rescued); len(early) > 0 {
		if more := w.recoveries(early, &d, true); len(more) > 0 {
			w.share(more)
			restores = append(restores, more...)
		}
	}

	// Copies on leaving nodes that must get out (before P1: durability of
	// what is committed before new checkpoints).
	evac := w.evacuations(running, runningHost, s.Flows)

	// Step 3: P1 on what is left.
	var paths [][]int
	var standbys []int
	var copies []replica
	d.Jobs, paths, standbys, copies, d.CheckpointBudget = w.checkpoints(running, runningHost, s.Flows)
	if len(rescued) > 0 {
		for _, r := range rescued {
			d.Jobs = append(d.Jobs, JobDecision{Job: r.job.ID, Bandwidth: r.rate, Interval: RescueInterval, Bound: BoundNow,
				Hazard: r.lambda, Standby: w.nodes[r.to].ID})
			paths = append(paths, r.links)
			standbys = append(standbys, r.to)
			running = append(running, r.job)
			runningHost = append(runningHost, r.host)
		}
		sortJobDecisions(d.Jobs, paths, standbys, running, runningHost)
	}
	d.Flows = make([]FlowDecision, 0, len(d.Jobs)+len(planned)+len(restores)+len(evac)+len(copies))
	// The flows' IDs are cut from one string (one allocation, not one
	// per flow).
	var ids strings.Builder
	for i := range d.Jobs {
		if jd := &d.Jobs[i]; jd.Standby != "" && jd.Bandwidth > 0 {
			ids.Grow(len(CheckpointPrefix) + len(jd.Job))
		}
	}
	for i := range d.Jobs {
		if jd := &d.Jobs[i]; jd.Standby != "" && jd.Bandwidth > 0 {
			ids.WriteString(CheckpointPrefix)
			ids.WriteString(string(jd.Job))
		}
	}
	idText, idPos := ids.String(), 0
	// Every flow's link names, in one array.
	all := append(planned, restores...)
	names := 0
	for i := range d.Jobs {
		if jd := &d.Jobs[i]; jd.Standby != "" && jd.Bandwidth > 0 {
			names += len(paths[i])
		}
	}
	for _, m := range all {
		names += len(m.links)
	}
	for _, m := range evac {
		names += len(m.links)
	}
	for _, c := range copies {
		names += len(c.links)
	}
	w.strArena = make([]string, 0, names)
	var m migration
	for i := range d.Jobs {
		jd := &d.Jobs[i]
		if jd.Standby == "" || jd.Bandwidth <= 0 {
			continue
		}
		j := running[i]
		idLen := len(CheckpointPrefix) + len(j.ID)
		m = migration{
			id: idText[idPos : idPos+idLen], job: j, from: runningHost[i], to: standbys[i], rate: jd.Bandwidth,
			start: now, links: paths[i],
		}
		idPos += idLen
		d.Flows = d.Flows[:len(d.Flows)+1] // within the capacity made above
		w.flowDecision(&d.Flows[len(d.Flows)-1], &m, ClassPresync)
	}

	// Step 4: the rest to migrations, max-min. (Evacuations keep the pace
	// that lands them before their holder leaves, as last-chance
	// checkpoints do: nobody waits for them, research traffic does.)
	if len(all) > 0 {
		w.share(all)
	}
	for _, m := range all {
		d.Flows = d.Flows[:len(d.Flows)+1]
		w.flowDecision(&d.Flows[len(d.Flows)-1], m, ClassMigration)
	}
	for _, m := range evac {
		d.Flows = d.Flows[:len(d.Flows)+1]
		w.flowDecision(&d.Flows[len(d.Flows)-1], m, ClassPresync)
	}
	for _, c := range copies {
		if c.rate <= 0 {
			continue
		}
		d.Flows = d.Flows[:len(d.Flows)+1]
		w.flowDecision(&d.Flows[len(d.Flows)-1], &migration{id: c.id, job: c.job, from: c.from, to: c.to,
			rate: c.rate, start: now, links: c.links}, ClassPresync)
	}
	slices.SortFunc(d.Flows, func(a, b FlowDecision) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortStableFunc(d.Handoffs, func(a, b HandoffDecision) int { return cmp.Compare(a.Job, b.Job) })
	slices.SortStableFunc(d.Placements, func(a, b Placement) int { return cmp.Compare(a.Job, b.Job) })
	d.Ineligible = ineligibleNodes(w)
	return d
}

// unrescued returns the jobs of the degraded hand-offs that got no
// last-chance checkpoint, in the hand-offs' order.
func unrescued(degraded []handoffReq, rescued []rescue) []*Job {
	var out []*Job
	for _, h := range degraded {
		if !slices.ContainsFunc(rescued, func(r rescue) bool { return r.job == h.job }) {
			out = append(out, h.job)
		}
	}
	return out
}

// share raises the flows' rates by max-min water-filling over the room
// left on their links (in both estimates) and charges what they get.
func (w *world) share(ms []*migration) {
	base := make([]float64, len(ms))
	links := make([][]int, len(ms))
	for i, m := range ms {
		base[i], links[i] = m.rate, m.links
	}
	rates := MaxMinShare(base, links, w.est, w.cf)
	for i, m := range ms {
		// What the flow gained is charged to the lower bounds too.
		if gain := rates[i] - m.rate; gain > 0 {
			for _, l := range m.links {
				w.low[l] = max(0, w.low[l]-gain*w.cf)
			}
		}
		m.rate = rates[i]
	}
}

// flowDecision writes a decided transfer's enforcement entry into f (a
// zero entry; filled in place, FlowDecision is large).
func (w *world) flowDecision(f *FlowDecision, m *migration, class TrafficClass) {
	f.ID, f.Job, f.From, f.To, f.Class = m.id, m.job.ID, w.nodes[m.from].ID, w.nodes[m.to].ID, class
	f.Rate, f.MinRate, f.Start, f.Deadline, f.Links = m.rate, m.minRate, m.start, m.deadline, w.linkIDs(m.links)
	if w.p.Switches.P3 {
		f.Ceiling = m.rate * w.cf
		f.Burst = max(w.p.MinBurst, int64(f.Ceiling*burstWindow.Seconds()))
	}
}

// transferTime is bytes/rate as a Duration (MaxInterval when rate ≤ 0).
func transferTime(bytes int64, rate float64) time.Duration {
	if bytes <= 0 {
		return 0
	}
	if rate <= 0 {
		return MaxInterval
	}
	return secondsToDuration(float64(bytes) / rate)
}

func sortedReplicas(r []NodeID) []NodeID {
	out := slices.Clone(r)
	slices.Sort(out)
	return slices.Compact(out)
}

// sortJobDecisions sorts the job decisions by job ID, keeping the parallel
// slices (path, standby, job, host of each) in step.
func sortJobDecisions(jd []JobDecision, paths [][]int, standbys []int, jobs []*Job, hosts []int) {
	idx := make([]int, len(jd))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(jd[a].Job, jd[b].Job) })
	jd2, p2, s2, j2, h2 := slices.Clone(jd), slices.Clone(paths), slices.Clone(standbys), slices.Clone(jobs), slices.Clone(hosts)
	for k, i := range idx {
		jd[k], paths[k], standbys[k], jobs[k], hosts[k] = jd2[i], p2[i], s2[i], j2[i], h2[i]
	}
}

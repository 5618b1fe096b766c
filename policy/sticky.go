package policy

import (
	"cmp"
	"slices"
	"time"
)

// KeepAdmittedHandoffs returns next with every scheduled hand-off that prev
// had admitted (a destination, a final checkpoint, not degraded) and that
// is under way kept as it was: same destination, still admitted, its
// migration flow at the rate it had or higher. A fresh Tick re-plans a
// hand-off as if the whole checkpoint were still to be sent, so as the
// deadline nears an admitted move that is going fine would read as
// infeasible, and the decision would flip-flop while the push runs.
//
// A hand-off is kept while, in s, its job is JobMigrating on the same
// source, now is before its deadline, the destination is an active node
// that is not leaving and is eligible (Node.Ineligible empty: a node that
// turns ineligible, its kill-switch hard, its disk full, its certificate
// unverified, takes no hand-off it was promised), and next still has a
// hand-off for the job with the same deadline (the reclaim was neither
// cancelled nor turned into an emergency). Otherwise next's decision stands. A kept hand-off drops any
// last-chance checkpoint (job decision and its pre-sync flow) next gave the
// job. next's flows are not re-planned around a kept flow: the kept rate
// is not charged against the links again this period.
func KeepAdmittedHandoffs(prev, next Decisions, s Snapshot, now time.Time) Decisions {
	jobs := make(map[JobID]*Job, len(s.Jobs))
	for i := range s.Jobs {
		jobs[s.Jobs[i].ID] = &s.Jobs[i]
	}
	usable := make(map[NodeID]bool, len(s.Nodes))
	for _, n := range s.Nodes {
		usable[n.ID] = !n.Leaving && n.Ineligible == ""
	}
	kept := map[JobID]bool{}
	next.Handoffs = slices.Clone(next.Handoffs) // the caller's slices stay as they were
	for _, p := range prev.Handoffs {
		if !p.Admitted() || !p.FinalCheckpoint || !now.Before(p.Deadline) || !usable[p.To] {
			continue
		}
		j, ok := jobs[p.Job]
		if !ok || j.State != JobMigrating || j.Node != p.From {
			continue
		}
		k := slices.IndexFunc(next.Handoffs, func(h HandoffDecision) bool { return h.Job == p.Job })
		if k < 0 || !next.Handoffs[k].Deadline.Equal(p.Deadline) {
			continue
		}
		kept[p.Job] = true
		n := &next.Handoffs[k]
		if n.To != p.To || !n.FinalCheckpoint || n.Degraded {
			*n = p
		}
	}
	if len(kept) == 0 {
		return next
	}
	next.Jobs = slices.DeleteFunc(slices.Clone(next.Jobs), func(jd JobDecision) bool { return kept[jd.Job] })
	prevFlow := map[JobID]FlowDecision{}
	for _, f := range prev.Flows {
		if kept[f.Job] && f.Class == ClassMigration {
			prevFlow[f.Job] = f
		}
	}
	flows := next.Flows[:0:0]
	for _, f := range next.Flows {
		if !kept[f.Job] {
			flows = append(flows, f)
			continue
		}
		p, ok := prevFlow[f.Job]
		if f.Class != ClassMigration || !ok {
			continue // a last-chance checkpoint, or a flow prev did not have
		}
		if f.To == p.To && f.Rate >= p.Rate {
			flows = append(flows, f)
		} else if f.To == p.To {
			f.Rate = p.Rate
			f.Ceiling, f.Burst = p.Ceiling, p.Burst
			f.MinRate = max(f.MinRate, p.MinRate)
			flows = append(flows, f)
		} else {
			flows = append(flows, p)
		}
		delete(prevFlow, f.Job)
	}
	for _, p := range prevFlow {
		flows = append(flows, p) // next had no flow: the admitted one goes on
	}
	slices.SortFunc(flows, func(a, b FlowDecision) int { return cmp.Compare(a.ID, b.ID) })
	next.Flows = flows
	return next
}

package view

import (
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// JobMoves is job id's moves off reclaimed or departed nodes, oldest
// first, for its story ('reclaimnet jobs JOB'): the reclaim history's
// outcome for it, with the figures of the page's history row (downtime,
// its limit and where it went, docs/design.md P3.8d).
func JobMoves(cs *state.State, id policy.JobID) []localapi.JobMove {
	var out []localapi.JobMove
	for _, rep := range cs.ReclaimReports {
		for _, o := range rep.Jobs {
			if o.Job != id {
				continue
			}
			w := webOutcome(rep, o)
			at := rep.Announced
			if at.IsZero() {
				at = rep.Left
			}
			out = append(out, localapi.JobMove{At: at, From: string(rep.Node), To: string(o.To),
				Emergency: rep.Kind == state.DepartureEmergency, Detected: rep.Detected,
				HandedOff: o.HandedOff, FinalCheckpoint: w.FinalCheckpoint, Replica: string(o.Replica), Version: o.Version,
				Reason: w.Reason, WorkLost: w.WorkLost, Downtime: w.Downtime, Resuming: w.Resuming, Limit: w.DowntimeLimit,
				Detection: w.Detection, Placement: w.Placement, Restore: w.Restore, Start: w.Start})
		}
	}
	return out
}

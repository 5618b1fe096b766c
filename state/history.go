package state

import (
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// The reclaim history (State.ReclaimReports) holds one entry per reclaim or
// departure, keyed by node and announcement. The owner's report
// (RecordReclaimReport) and the cluster's own record meet in it: the state
// machine creates or completes the entry when the node departs (so a node
// that vanished, or whose owner's emergency report never got out, is in
// the history too) and adds, per job, what the cluster did: the hand-off's
// destination, or the placement after the departure with the replica it
// restored from and the work lost. Everything here runs inside Apply, so
// every node records the same history.

// detectionWindow is how long after an owner's announcement failure
// detection may record the departure: an owner's report that arrives later
// (an emergency's, sent when the agent starts again) joins the entry the
// cluster made at detection when their announcements are this close.
const detectionWindow = 10 * time.Minute

// historyEntry returns the index of the entry of node announced at, or -1.
func historyEntry(s *State, node policy.NodeID, announced time.Time) int {
	for i := len(s.ReclaimReports) - 1; i >= 0; i-- {
		if r := s.ReclaimReports[i]; r.Node == node && r.Announced.Equal(announced) {
			return i
		}
	}
	return -1
}

// appendHistory adds r, dropping the oldest entries beyond the bound.
func appendHistory(s *State, r ReclaimReport) {
	s.ReclaimReports = append(s.ReclaimReports, r)
	if len(s.ReclaimReports) > maxReclaimReports {
		s.ReclaimReports = slices.Clone(s.ReclaimReports[len(s.ReclaimReports)-maxReclaimReports:])
	}
}

// noteDeparture makes sure the departure has its history entry: it sets
// Left on the entry of the pending reclaim (the owner's report, if it came
// first) or creates a cluster-only one.
func noteDeparture(s *State, d Departure, r policy.Reclaim, reclaimed bool, announced time.Time) {
	if i := historyEntry(s, d.Node, announced); i >= 0 {
		e := s.ReclaimReports[i].clone()
		if e.Left.IsZero() {
			e.Left = d.At
		}
		s.ReclaimReports[i] = e
		return
	}
	e := ReclaimReport{Node: d.Node, Kind: d.Kind, Announced: announced, Deadline: d.At, Left: d.At, ClusterOnly: true}
	if reclaimed {
		e.Deadline = r.Deadline
	} else {
		e.Detected, e.Graceful = true, d.Graceful
	}
	if e.Deadline.Before(e.Announced) {
		e.Deadline = e.Announced
	}
	appendHistory(s, e)
}

// addOutcome records o in the entry of node announced at, creating a
// cluster-only entry (kind from kind) when there is none yet.
func addOutcome(s *State, node policy.NodeID, announced, deadline time.Time, kind DepartureKind, o JobOutcome) {
	i := historyEntry(s, node, announced)
	if i < 0 {
		if deadline.Before(announced) {
			deadline = announced
		}
		appendHistory(s, ReclaimReport{Node: node, Kind: kind, Announced: announced, Deadline: deadline, ClusterOnly: true})
		i = len(s.ReclaimReports) - 1
	}
	e := s.ReclaimReports[i].clone()
	if k := slices.IndexFunc(e.Jobs, func(x JobOutcome) bool { return x.Job == o.Job }); k >= 0 {
		e.Jobs[k] = o
	} else if len(e.Jobs) < maxReportJobs {
		e.Jobs = append(e.Jobs, o)
	}
	s.ReclaimReports[i] = e
}

// noteResumed records c.Ready as the Resumed time of the job's newest
// outcome in the history, when that outcome placed it on c.Node and has
// none yet, with c's restore time and limit (a recovery's limit adds its
// detection time: the departure to the cluster's record of it); it
// reports whether it changed the history.
func noteResumed(s *State, c JobReport) bool {
	for i := len(s.ReclaimReports) - 1; i >= 0; i-- {
		k := slices.IndexFunc(s.ReclaimReports[i].Jobs, func(o JobOutcome) bool { return o.Job == c.Job })
		if k < 0 {
			continue
		}
		if o := s.ReclaimReports[i].Jobs[k]; o.To != c.Node || !o.Resumed.IsZero() || c.Ready.Before(o.At) {
			return false
		}
		e := s.ReclaimReports[i].clone()
		o := &e.Jobs[k]
		o.Resumed, o.Restored = c.Ready, c.Restored
		if !o.HandedOff && c.Limit > 0 {
			o.Limit = c.Limit + e.detection(*o)
		}
		s.ReclaimReports[i] = e
		return true
	}
	return false
}

// DowntimeStart is when job outcome o of this entry stopped computing: a
// hand-off's Stopped; for a recovery, the departure (the command, for an
// emergency reclaim: it stops the jobs at once). Zero when not known.
func (r ReclaimReport) DowntimeStart(o JobOutcome) time.Time {
	if o.HandedOff {
		return o.Stopped
	}
	start := r.Left
	if r.Kind == DepartureEmergency && !r.Announced.IsZero() && (start.IsZero() || r.Announced.Before(start)) {
		start = r.Announced
	}
	return start
}

// noteHandoff records a finished hand-off off a node with a pending reclaim.
func noteHandoff(s *State, r policy.Reclaim, c MoveJob, j JobRecord) {
	kind := DepartureScheduled
	if r.Emergency() {
		kind = DepartureEmergency
	}
	o := JobOutcome{Job: j.ID, To: c.To, HandedOff: true, Version: c.Version, NoFinalCheckpoint: c.NoFinalCheckpoint,
		Stopped: c.Stopped, Limit: c.Limit}
	if cp, ok := s.CheckpointVersion(j.ID, c.Version); ok && c.NoFinalCheckpoint && cp.Committed && !c.At.IsZero() {
		// As for a recovery: the work since the version's commit.
		o.LostWork = max(c.At.Sub(cp.CommittedAt), 0)
	}
	addOutcome(s, c.From, r.Announced, r.Deadline, kind, o)
}

// noteRecovery records the placement p of j, displaced by a departure:
// the replica it restores from (the freshest committed version that
// p.From holds) and the work lost since that version's commit (since the
// job's submission when nothing survived).
func noteRecovery(s *State, j JobRecord, p policy.Placement, at time.Time) {
	s.Counters.DegradedRecoveries++
	o := JobOutcome{Job: j.ID, To: p.To, At: at, Detected: j.Displaced.At}
	lostSince := j.Submitted
	if p.From != "" {
		cps := s.Checkpoints[j.ID]
		for k := len(cps) - 1; k >= 0; k-- {
			if cps[k].Committed && slices.Contains(cps[k].Holders, p.From) {
				o.Replica, o.Version = p.From, cps[k].Version
				lostSince = cps[k].CommittedAt
				break
			}
		}
	}
	if d := j.Displaced.At.Sub(lostSince); !lostSince.IsZero() && d > 0 {
		o.LostWork = d
	}
	kind := DepartureEmergency
	if i := historyEntry(s, j.Displaced.From, j.Displaced.Announced); i >= 0 {
		kind = s.ReclaimReports[i].Kind
	}
	addOutcome(s, j.Displaced.From, j.Displaced.Announced, j.Displaced.At, kind, o)
}

// ownerReportEntry returns the entry an owner's report r belongs to: the
// one with the same node and announcement, else the newest cluster-only
// entry of the node found by detection at most detectionWindow after r's
// announcement (the emergency whose announcement never committed); -1 when
// there is none.
func ownerReportEntry(s *State, r ReclaimReport) int {
	if i := historyEntry(s, r.Node, r.Announced); i >= 0 {
		return i
	}
	if r.Kind != DepartureEmergency {
		return -1
	}
	for i := len(s.ReclaimReports) - 1; i >= 0; i-- {
		e := s.ReclaimReports[i]
		if e.Node != r.Node || !e.ClusterOnly || !e.Detected {
			continue
		}
		if lag := e.Announced.Sub(r.Announced); lag >= 0 && lag <= detectionWindow {
			return i
		}
	}
	return -1
}

// mergeOwnerReport is the entry old with the owner's report r in it: the
// owner's figures and announcement, the cluster's job outcomes, departure
// time and detection flag.
func mergeOwnerReport(old, r ReclaimReport) ReclaimReport {
	r.Jobs = slices.Clone(old.Jobs)
	r.Detected, r.Graceful = old.Detected, old.Graceful
	r.ClusterOnly = false
	if r.Left.IsZero() {
		r.Left = old.Left
	}
	// The owner's announcement can move a recovery's downtime start
	// earlier (a --now the cluster found by detection): the limits already
	// recorded count the detection time from the new start.
	for k, o := range r.Jobs {
		if !o.HandedOff && o.Limit > 0 && !o.Resumed.IsZero() {
			r.Jobs[k].Limit += r.detection(o) - old.detection(o)
		}
	}
	return r
}

// detection is the part of recovery o's downtime before the cluster
// recorded the departure: from the downtime's start to o.Detected (0 when
// not known or not later).
func (r ReclaimReport) detection(o JobOutcome) time.Duration {
	if start := r.DowntimeStart(o); !start.IsZero() && o.Detected.After(start) {
		return o.Detected.Sub(start)
	}
	return 0
}

// rekeyDisplaced points the jobs still waiting for recovery from node's
// departure at the entry's new key (an owner's report moved it to its own
// announcement), so their outcomes land in the same entry.
func rekeyDisplaced(s *State, node policy.NodeID, from, to time.Time) {
	for id, j := range s.Jobs {
		if j.Displaced.From == node && j.Displaced.Announced.Equal(from) {
			j.Displaced.Announced = to
			s.Jobs[id] = j
		}
	}
}

package state

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Bounds that keep the replicated state small.
const (
	// maxDepartures is how many departures the log keeps (the oldest go
	// first); the hazard estimator looks at a sliding window anyway.
	maxDepartures = 16384
	// keepVersions is how many checkpoint versions per job the catalogue
	// keeps once a newer one is committed.
	keepVersions = 3
	// maxReclaimReports is how many reclaim reports the history keeps
	// (the oldest go first); maxReportJobs bounds the jobs of one.
	maxReclaimReports = 100
	maxReportJobs     = 4096
)

// Apply changes s by cmd, as every node does with each log entry, and
// reports whether anything changed. It never changes s when it returns an
// error.
func (s *State) Apply(cmd Command) (bool, error) {
	switch c := cmd.(type) {
	case UpsertNode:
		old, ok := s.Nodes[c.Node.ID]
		n := c.Node
		n.Stretches = slices.Clone(old.Stretches)
		if n.State == NodeActive && !n.Joined.IsZero() {
			last := len(n.Stretches) - 1
			if last < 0 || !n.Stretches[last].From.Equal(n.Joined) {
				if last >= 0 && n.Stretches[last].To.IsZero() {
					n.Stretches[last].To = n.Joined
				}
				n.Stretches = append(n.Stretches, Interval{From: n.Joined})
				if len(n.Stretches) > maxStretches {
					n.Stretches = n.Stretches[len(n.Stretches)-maxStretches:]
				}
			}
		}
		// A new incarnation (its membership began after the reclaim was
		// announced, or after the membership the reclaim was recorded
		// for: gossip carries starts in whole seconds, so a restart
		// within the announcement's second may read as older than it)
		// is not leaving: the pending reclaim belonged to the one before,
		// whose departure may never be logged when the node came back
		// before the leader saw it gone.
		r, reclaimed := s.Reclaims[n.ID]
		endReclaim := reclaimed && n.State == NodeActive &&
			(n.Joined.After(r.Announced) || !r.Incarnation.IsZero() && n.Joined.After(r.Incarnation))
		if ok && reflect.DeepEqual(old, n) && !endReclaim {
			return false, nil
		}
		s.Nodes[c.Node.ID] = n
		if endReclaim {
			delete(s.Reclaims, n.ID)
		}
		return true, nil

	case SubmitJob:
		j := c.Job.clone()
		j.State, j.Node, j.Replicas, j.Restarts, j.Started = policy.JobPending, "", nil, 0, false
		j.Standby = ""
		j.clearStandbyHas()
		j.Failures, j.FailureLog, j.LastExit, j.End = 0, nil, nil, JobEnd{}
		j.Events = []JobEvent{{At: j.Submitted, Kind: EventSubmitted, Detail: "by " + cmp.Or(j.Owner, "an unnamed user")}}
		if old, ok := s.Jobs[j.ID]; ok {
			if sameSubmission(old, j) {
				return false, nil
			}
			return false, fmt.Errorf("submit %s: %w", j.ID, ErrJobExists)
		}
		s.Jobs[j.ID] = j
		return true, nil

	case CancelJob:
		return applyCancel(s, c)

	case JobExited:
		return applyJobExited(s, c)

	case JobReport:
		j, ok := s.Jobs[c.Job]
		if !ok {
			return false, fmt.Errorf("report %s: %w", c.Job, ErrUnknownJob)
		}
		if j.Node != c.Node {
			return false, fmt.Errorf("report %s from %s: %w", c.Job, c.Node, ErrNotHost)
		}
		old := j.clone()
		if c.CheckpointBytes > 0 {
			j.CheckpointBytes = c.CheckpointBytes
			j.resizeStandbyHas(old.CheckpointBytes)
		}
		if err := applyPresync(s, &j, c.Node, c.Presync); err != nil {
			return false, err
		}
		if c.RestartTime > 0 {
			j.RestartTime = c.RestartTime
		}
		j.Remaining = c.Remaining
		if c.Done && j.State != policy.JobDone {
			j.State, j.End = policy.JobDone, JobEnd{Kind: EndDone}
			j.addEvent(JobEvent{Kind: EventDone, Node: c.Node, Detail: "reported done by its host"})
		}
		resumed := !c.Ready.IsZero() && noteResumed(s, c)
		if reflect.DeepEqual(old, j) {
			return resumed, nil
		}
		s.Jobs[c.Job] = j
		return true, nil

	case MoveJob:
		j, ok := s.Jobs[c.Job]
		if !ok {
			return false, fmt.Errorf("move %s: %w", c.Job, ErrUnknownJob)
		}
		if j.Node == c.To && j.State == policy.JobRunning {
			return false, nil // already applied
		}
		if j.Node != c.From {
			return false, fmt.Errorf("move %s %s→%s (on %q): %w", c.Job, c.From, c.To, j.Node, ErrStaleMove)
		}
		if r, ok := s.Reclaims[c.From]; ok {
			noteHandoff(s, r, c, j)
		}
		if c.NoFinalCheckpoint {
			s.Counters.DegradedRecoveries++
		} else {
			s.Counters.Handoffs++
		}
		j = j.clone()
		j.Node, j.State, j.Restore = c.To, policy.JobRunning, RestoreOrder{}
		j.RunningSince, j.HandoffStopped = c.At, c.Stopped
		j.Restarts++
		detail := "handed off with its final checkpoint"
		if c.NoFinalCheckpoint {
			detail = "handed off without a final checkpoint"
		}
		j.addEvent(JobEvent{At: c.At, Kind: EventMoved, Node: c.To, From: c.From, Version: c.Version, Detail: detail})
		// The new host starts from the final checkpoint: what the standby
		// held of the old host's state says nothing of it.
		if j.Standby == c.To {
			j.Standby = ""
		}
		j.clearStandbyHas()
		s.Jobs[c.Job] = j
		return true, nil

	case ReplicaComplete:
		return applyReplicaComplete(s, c)

	case AnnounceReclaim:
		if old, ok := s.Reclaims[c.Reclaim.Node]; ok && reclaimEqual(old, c.Reclaim) {
			return false, nil
		}
		if staleReclaim(s, c.Reclaim) {
			// Applied after the node's departure or its next incarnation
			// (a late or repeated submission): it would stay pending forever.
			return false, nil
		}
		r := c.Reclaim
		r.Incarnation = time.Time{}
		if n, ok := s.Nodes[r.Node]; ok && n.State == NodeActive {
			r.Incarnation = n.Joined
		}
		s.Reclaims[r.Node] = r
		return true, nil

	case CancelReclaim:
		if _, ok := s.Reclaims[c.Node]; !ok {
			return false, nil
		}
		delete(s.Reclaims, c.Node)
		return true, nil

	case RecordDeparture:
		return applyDeparture(s, c.Departure), nil

	case PublishHazards:
		hz := map[policy.NodeID]policy.HazardEstimate{}
		for id, h := range c.Hazards {
			hz[id] = cloneHazard(h)
		}
		if s.HazardsAt.Equal(c.At) && reflect.DeepEqual(s.Hazards, hz) {
			return false, nil
		}
		s.Hazards, s.HazardsAt = hz, c.At
		return true, nil

	case SetDecisions:
		return applyDecisions(s, c.Decisions), nil

	case RecordReclaimReport:
		return applyReclaimReport(s, c.Report), nil
	}
	if changed, ok, err := applyEnrollment(s, cmd); ok {
		return changed, err
	}
	return false, fmt.Errorf("%w: %T", ErrUnknownCommand, cmd)
}

// sameSubmission compares what a submitter controls.
func sameSubmission(a, b JobRecord) bool {
	return a.ID == b.ID && a.Owner == b.Owner && reflect.DeepEqual(a.Spec, b.Spec) &&
		a.CheckpointBytes == b.CheckpointBytes && a.LossBudget == b.LossBudget &&
		a.GPUs == b.GPUs && a.VRAM == b.VRAM && a.Capability == b.Capability &&
		a.WriteCap == b.WriteCap && a.Copies == b.Copies && a.Submitted.Equal(b.Submitted) && a.MaxFailures == b.MaxFailures
}

// staleReclaim reports whether r was announced before the node's logged
// departure or before its current membership began: the reclaim of an
// incarnation that is gone.
func staleReclaim(s *State, r policy.Reclaim) bool {
	if n, ok := s.Nodes[r.Node]; ok && n.Joined.After(r.Announced) {
		return true
	}
	for i := len(s.Departures) - 1; i >= 0 && !s.Departures[i].At.Before(r.Announced); i-- {
		if s.Departures[i].Node == r.Node {
			return true
		}
	}
	return false
}

func reclaimEqual(a, b policy.Reclaim) bool {
	return a.Node == b.Node && a.Announced.Equal(b.Announced) && a.Deadline.Equal(b.Deadline)
}

func applyReplicaComplete(s *State, c ReplicaComplete) (bool, error) {
	if _, ok := s.Jobs[c.Job]; !ok {
		return false, fmt.Errorf("replica %s v%d: %w", c.Job, c.Version, ErrUnknownJob)
	}
	cps := s.Checkpoints[c.Job]
	i, found := slices.BinarySearchFunc(cps, c.Version, func(cp Checkpoint, v uint64) int { return cmp.Compare(cp.Version, v) })
	if !found {
		if len(cps) >= keepVersions && i == 0 {
			return false, nil // older than everything kept: nothing to record
		}
		cps = slices.Insert(slices.Clone(cps), i, Checkpoint{
			Job: c.Job, Version: c.Version, ManifestHash: c.ManifestHash, Size: c.Size, Source: c.Source,
		})
	} else {
		cps = slices.Clone(cps)
	}
	cp := cps[i].clone()
	if cp.ManifestHash != c.ManifestHash || cp.Source != c.Source || cp.Size != c.Size {
		return false, fmt.Errorf("replica %s v%d: %w", c.Job, c.Version, ErrManifestClash)
	}
	if slices.Contains(cp.Holders, c.Holder) {
		return false, nil // at most once
	}
	cp.Holders = append(cp.Holders, c.Holder)
	slices.Sort(cp.Holders)
	if j := s.Jobs[c.Job]; j.Restore.From != "" && j.Node == c.Holder && c.Version >= j.Restore.Version {
		j.Restore = RestoreOrder{}
		s.Jobs[c.Job] = j
	}
	if c.Holder != c.Source && !cp.Committed {
		cp.Committed, cp.CommittedAt = true, c.At
		j := s.Jobs[c.Job].clone()
		j.addEvent(JobEvent{At: c.At, Kind: EventCheckpoint, Node: c.Holder, From: c.Source, Version: c.Version,
			Detail: fmt.Sprintf("v%d committed (%d bytes) on %s", c.Version, c.Size, c.Holder)})
		s.Jobs[c.Job] = j
	}
	if c.Holder == c.Source {
		cp.Written = c.At
	}
	cps[i] = cp
	// Keep the newest versions once a newer one is committed: never drop
	// the freshest committed version.
	if len(cps) > keepVersions {
		newestCommitted := -1
		for k := len(cps) - 1; k >= 0; k-- {
			if cps[k].Committed {
				newestCommitted = k
				break
			}
		}
		drop := len(cps) - keepVersions
		if newestCommitted >= 0 && drop > newestCommitted {
			drop = newestCommitted
		}
		cps = cps[drop:]
	}
	s.Checkpoints[c.Job] = cps
	followStandbyVersion(s, c.Job)
	return true, nil
}

func applyDeparture(s *State, d Departure) bool {
	// The log is ordered by time; a repeat is found by (node, time, kind).
	i, _ := slices.BinarySearchFunc(s.Departures, d.At, func(e Departure, at time.Time) int { return e.At.Compare(at) })
	for k := i; k < len(s.Departures) && s.Departures[k].At.Equal(d.At); k++ {
		if s.Departures[k].Node == d.Node && s.Departures[k].Kind == d.Kind {
			return false
		}
	}
	r, reclaimed := s.Reclaims[d.Node]
	// A departure ends the reclaims announced before it, not one of a
	// later incarnation (a departure logged late).
	reclaimed = reclaimed && !r.Announced.After(d.At)
	if reclaimed && d.Kind == DepartureScheduled && d.Notice == 0 && r.Deadline.After(r.Announced) {
		d.Notice = r.Deadline.Sub(r.Announced)
	}
	s.Departures = slices.Insert(s.Departures, i, d)
	if len(s.Departures) > maxDepartures {
		s.Departures = slices.Clone(s.Departures[len(s.Departures)-maxDepartures:])
	}
	if n, ok := s.Nodes[d.Node]; ok && (n.State != NodeLeft || n.Left.Before(d.At)) && !n.Joined.After(d.At) {
		n = n.clone()
		n.State, n.Left = NodeLeft, d.At
		if last := len(n.Stretches) - 1; last >= 0 && n.Stretches[last].To.IsZero() && !n.Stretches[last].From.After(d.At) {
			n.Stretches[last].To = d.At
		}
		s.Nodes[d.Node] = n
	}
	announced := d.At
	if reclaimed {
		announced = r.Announced
	}
	noteDeparture(s, d, r, reclaimed, announced)
	if reclaimed {
		delete(s.Reclaims, d.Node)
	}
	for id, j := range s.Jobs {
		changed := false
		if j.Node == d.Node && (j.State == policy.JobRunning || j.State == policy.JobMigrating) {
			j = j.clone()
			j.State, j.Node = policy.JobRecovering, ""
			j.Displaced = Displacement{From: d.Node, At: d.At, Announced: announced}
			j.addEvent(JobEvent{At: d.At, Kind: EventDisplaced, Node: d.Node, Detail: "its node left (" + d.Kind.String() + ")"})
			changed = true
		}
		if j.Restore.From == d.Node && j.State == policy.JobRunning {
			// Its copy was to come from the node that left: place it
			// again, from the replicas that remain.
			j.State, j.Node, j.Restore = policy.JobRecovering, "", RestoreOrder{}
			changed = true
		}
		if j.Standby == d.Node {
			j.Standby = ""
			j.clearStandbyHas()
			changed = true
		}
		if changed {
			s.Jobs[id] = j
		}
	}
	return true
}

// applyReclaimReport adds r to the history or replaces the report of the
// same node and announcement; an equal report changes nothing.
func applyReclaimReport(s *State, r ReclaimReport) bool {
	r = r.clone()
	i := ownerReportEntry(s, r)
	if i >= 0 {
		old := s.ReclaimReports[i]
		r = mergeOwnerReport(old, r)
		if !old.Announced.Equal(r.Announced) {
			rekeyDisplaced(s, r.Node, old.Announced, r.Announced)
		}
		if reflect.DeepEqual(s.ReclaimReports[i], r) {
			return false
		}
		s.ReclaimReports[i] = r
		return true
	}
	r.Jobs, r.Detected, r.ClusterOnly, r.Graceful = nil, false, false, false // the cluster's to record
	appendHistory(s, r)
	return true
}

func applyDecisions(s *State, d DecisionRecord) bool {
	changed := false
	d = d.clone()
	if !reflect.DeepEqual(s.Decisions, d) {
		countHandoffDecisions(&s.Counters, s.Decisions.Handoffs, d.Handoffs)
		s.Decisions = d
		changed = true
	}
	for _, p := range d.Placements {
		j, ok := s.Jobs[p.Job]
		if !ok || j.State == policy.JobDone || p.To == "" {
			continue // a placement without a node leaves the job waiting, with its reason
		}
		switch {
		case j.State == policy.JobPending || j.State == policy.JobRecovering:
		case earlyRecovery(s, d, j, p):
			// A degraded hand-off recovered before its node leaves
			// (policy.Tick): displaced now, by the pending reclaim.
			j.Displaced = Displacement{From: j.Node, At: d.At, Announced: s.Reclaims[j.Node].Announced}
		default:
			continue
		}
		j = j.clone()
		j.addEvent(placementEvent(j, p, d.At))
		if j.Started {
			j.Restarts++
		}
		if !j.Displaced.At.IsZero() {
			noteRecovery(s, j, p, d.At)
			j.Displaced = Displacement{}
		}
		j.Restore = RestoreOrder{}
		if p.From != "" && p.From != p.To {
			if v, ok := newestHeld(s, j.ID, p.From); ok && !slices.Contains(holdersOf(s, j.ID, v), p.To) {
				j.Restore = RestoreOrder{From: p.From, Version: v}
			}
		}
		j.Node, j.State, j.Started = p.To, policy.JobRunning, true
		j.RunningSince, j.HandoffStopped = d.At, time.Time{}
		j.clearStandbyHas() // a new host's state: its host reports again
		s.Jobs[p.Job] = j
		changed = true
	}
	for _, h := range d.Handoffs {
		j, ok := s.Jobs[h.Job]
		if !ok || j.Node != h.From || j.State != policy.JobRunning || h.To == "" {
			continue
		}
		j.State = policy.JobMigrating
		s.Jobs[h.Job] = j
		changed = true
	}
	for _, jd := range d.Jobs {
		j, ok := s.Jobs[jd.Job]
		if !ok || j.Standby == jd.Standby {
			continue
		}
		j.Standby = jd.Standby
		j.clearStandbyHas()
		s.Jobs[jd.Job] = j
		changed = true
	}
	return changed
}

// countHandoffDecisions counts the hand-off decisions in cur that prev did
// not hold with the same verdict (the leader decides again every tick).
func countHandoffDecisions(c *Counters, prev, cur []policy.HandoffDecision) {
	for _, h := range cur {
		seen := slices.ContainsFunc(prev, func(p policy.HandoffDecision) bool {
			return p.Job == h.Job && p.From == h.From && p.Deadline.Equal(h.Deadline) && p.Admitted() == h.Admitted()
		})
		switch {
		case seen:
		case h.Admitted():
			c.AdmittedHandoffs++
		default:
			c.DegradedHandoffs++
		}
	}
}

// earlyRecovery reports whether p recovers j, still running, from a node
// under a pending reclaim whose hand-off the same decisions marked
// degraded.
func earlyRecovery(s *State, d DecisionRecord, j JobRecord, p policy.Placement) bool {
	if !p.Recovery || p.To == "" || p.To == j.Node || j.State != policy.JobRunning {
		return false
	}
	if _, ok := s.Reclaims[j.Node]; !ok {
		return false
	}
	for _, h := range d.Handoffs {
		if h.Job == j.ID && h.From == j.Node && h.Degraded {
			return true
		}
	}
	return false
}

// newestHeld returns the newest committed version of job that node holds.
func newestHeld(s *State, job policy.JobID, node policy.NodeID) (uint64, bool) {
	cps := s.Checkpoints[job]
	for k := len(cps) - 1; k >= 0; k-- {
		if cps[k].Committed && slices.Contains(cps[k].Holders, node) {
			return cps[k].Version, true
		}
	}
	return 0, false
}

// holdersOf returns the holders of version v of job (none if unknown).
func holdersOf(s *State, job policy.JobID, v uint64) []policy.NodeID {
	cp, _ := s.CheckpointVersion(job, v)
	return cp.Holders
}

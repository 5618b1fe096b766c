package raft

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/policy"
)

// maxCandidates bounds the candidate lists a committed decision keeps per
// placement or hand-off (they explain a choice; the full list would make
// every decision entry grow with the cluster).
const maxCandidates = 8

// watchLeadership runs the leader loop while this node leads. It watches
// Config.NotifyCh, which (unlike LeaderCh) delivers every transition.
func (c *Coordinator) watchLeadership() {
	var loop *leaderRun
	defer func() { loop.stop() }()
	for {
		select {
		case <-c.stop:
			return
		case isLeader := <-c.notify:
			if !isLeader {
				loop.stop()
				loop = nil
				continue
			}
			if loop == nil {
				loop = c.startLeaderLoop()
			}
		}
	}
}

// leaderRun is one running leader loop.
type leaderRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *Coordinator) startLeaderLoop() *leaderRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &leaderRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		c.leaderLoop(ctx)
	}()
	return r
}

// stop cancels the loop and waits for it; a nil run is a no-op.
func (r *leaderRun) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

// leaderLoop is the leader's control loop: barrier (so the state machine
// holds everything the previous leader committed), reconcile, then a tick
// every control period and at once on a new job, reclaim or departure.
func (c *Coordinator) leaderLoop(ctx context.Context) {
	for {
		if err := c.raft.Barrier(c.cfg.ApplyTimeout).Error(); err == nil {
			break
		} else if ctx.Err() != nil {
			return
		} else {
			c.logger.Warn("leader barrier failed; retrying", "err", err)
		}
	}
	c.forgetHeartbeats()
	c.leading.Store(true)
	defer c.leading.Store(false)
	c.logger.Info("leading")
	lt := &leaderTicker{}
	// Read the event counter before each tick: an event applied while a
	// tick runs is then seen as new and ticks again.
	seenEvents, _ := c.store.EventCounts()
	c.runTick(ctx, lt)
	ticker := time.NewTicker(c.cfg.ControlPeriod)
	defer ticker.Stop()
	for ctx.Err() == nil {
		changed := c.store.Changed()
		if ev, _ := c.store.EventCounts(); ev == seenEvents {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue // look at the counter again
			case <-ticker.C:
			case <-c.kick:
			}
		}
		seenEvents, _ = c.store.EventCounts()
		c.runTick(ctx, lt)
	}
}

// leaderTicker is the state one leadership term keeps between ticks.
type leaderTicker struct {
	est        *policy.HazardEstimator
	departures uint64 // FSM departure counter the estimator has seen
	lastUp     time.Time
	co         CoDepartureLog
}

func (c *Coordinator) runTick(ctx context.Context, lt *leaderTicker) {
	now := c.cfg.Clock()
	tel := c.cfg.Telemetry
	var members []Member
	if tel != nil {
		members = tel.Members()
		c.mu.Lock()
		c.members = slices.Clone(members)
		c.mu.Unlock()
	} else {
		c.mu.Lock()
		members = slices.Clone(c.members)
		c.mu.Unlock()
	}
	if members != nil {
		if err := c.reconcile(members, now); err != nil {
			c.logger.Warn("reconcile", "err", err)
		}
	}
	if ctx.Err() != nil || !c.leading.Load() {
		return
	}
	st := c.store.State()
	hazards, err := c.estimateHazards(lt, st, now)
	if err != nil {
		c.logger.Error("hazard estimate", "err", err)
		return
	}
	c.publishHazards(st, hazards, now)

	dec := decide(st, hazards, lt.co.Estimate(st, now), tel, c.unverifiedPeers(), c.cfg.Params, now)
	c.ticks.Add(1)
	c.lastTick.Store(now.UnixNano())
	trimCandidates(&dec)
	norm := state.Normalize(dec).(policy.Decisions)
	prev := state.Normalize(st.Decisions.Decisions).(policy.Decisions)
	// A leader whose protocol settings differ from the recorded ones
	// commits at once, so the cluster shows the switches in force.
	mine := state.ProtocolsOf(c.cfg.Params)
	sameProtocols := st.Decisions.Protocols != nil && *st.Decisions.Protocols == mine
	if sameProtocols && reflect.DeepEqual(prev, norm) {
		return
	}
	// Drift within tolerance waits for the refresh period.
	fresh := now.Sub(st.Decisions.At) < refreshPeriod(c.cfg.ControlPeriod)
	if sameProtocols && fresh && state.MateriallyEqual(prev, norm, c.cfg.ControlPeriod) {
		return
	}
	cmd := state.SetDecisions{Decisions: state.DecisionRecord{Decisions: norm, At: now, Leader: c.cfg.NodeID, Protocols: &mine}}
	if _, err := c.applyCommand(cmd); err != nil {
		if !errors.Is(err, state.ErrInvalidCommand) {
			c.logger.Warn("commit decisions", "err", err) // lost leadership, a timeout: the next tick retries
			return
		}
		c.noteRefused(err, now)
		return
	}
	c.noteRefused(nil, now)
	c.commits.Add(1)
}

// noteRefused records the outcome of a decision commit: a refusal is
// logged when its error differs from the last one (the leader retries
// every period; a log line per period would bury it), and kept for the
// status page until decisions commit again. Only the decisions are lost:
// the next tick decides from scratch.
func (c *Coordinator) noteRefused(err error, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		if c.refused != "" {
			c.logger.Info("decisions commit again")
		}
		c.refused, c.refusedAt = "", time.Time{}
		return
	}
	if msg := err.Error(); msg != c.refused {
		c.logger.Error("decisions refused: the policy produced a command the state machine rejects", "err", err)
		c.refused, c.refusedAt = msg, now
	}
}

// decide is one tick's decisions: policy.Tick on the snapshot, with the
// hand-offs the committed decisions admitted and that are under way kept
// (policy.KeepAdmittedHandoffs): the snapshot learns a moving checkpoint's
// progress from gossip, a telemetry interval late (or never, from a node
// that does not report it), so re-deciding from scratch could flip an
// admitted move to "degraded" as its deadline nears.
// co is the co-departure estimate (nil: departures independent);
// unverified the peers whose certificate the leader could not verify, with why.
func decide(st *state.State, hazards map[policy.NodeID]policy.HazardEstimate, co *policy.CoDeparture, tel Telemetry, unverified map[policy.NodeID]string, params policy.Params, now time.Time) policy.Decisions {
	snap := eligibleSnapshot(st, hazards, tel, unverified, params, now)
	snap.CoDeparture = co
	return policy.KeepAdmittedHandoffs(st.Decisions.Decisions, policy.Tick(snap, now), snap, now)
}

// applyCommand applies cmd on this node as leader.
func (c *Coordinator) applyCommand(cmd state.Command) (uint64, error) {
	b, err := state.EncodeCommand(cmd)
	if err != nil {
		return 0, err
	}
	return c.applyLocal(b)
}

// estimateHazards updates the term's estimator from the replicated state
// (rebuilt from the departure log and the nodes' membership stretches when
// the log changed, so a new leader starts where the old one stood) and
// returns each active node's estimate.
func (c *Coordinator) estimateHazards(lt *leaderTicker, st *state.State, now time.Time) (map[policy.NodeID]policy.HazardEstimate, error) {
	_, deps := c.store.EventCounts()
	if lt.est == nil || deps != lt.departures {
		est, err := policy.NewHazardEstimator(policy.DefaultHazardConfig())
		if err != nil {
			return nil, fmt.Errorf("new hazard estimator: %w", err)
		}
		for _, d := range st.Departures {
			est.Observe(policy.Departure{Node: d.Node, At: d.At, Emergency: d.Kind == state.DepartureEmergency})
		}
		lt.est, lt.departures = est, deps
		lt.lastUp = time.Time{}
	}
	for _, n := range st.Nodes {
		for _, s := range n.Stretches {
			to := s.To
			if to.IsZero() {
				to = now
			}
			if !lt.lastUp.IsZero() && to.Before(lt.lastUp) {
				continue // already recorded
			}
			if to.After(s.From) {
				lt.est.Up(n.ID, s.From, to)
			}
		}
	}
	lt.lastUp = now
	out := map[policy.NodeID]policy.HazardEstimate{}
	for id, n := range st.Nodes {
		if n.State == state.NodeActive {
			out[id] = lt.est.Estimate(id, now)
		}
	}
	return out, nil
}

// publishHazards commits the estimates when a departure changed them or
// HazardPublishPeriod passed: the leader decides with fresh estimates every
// tick, but the log carries them only at that pace.
func (c *Coordinator) publishHazards(st *state.State, hz map[policy.NodeID]policy.HazardEstimate, now time.Time) {
	c.mu.Lock()
	last := c.hazardsPublAt
	c.mu.Unlock()
	sameNodes := len(st.Hazards) == len(hz)
	for id := range hz {
		if _, ok := st.Hazards[id]; !ok {
			sameNodes = false
		}
	}
	due := !sameNodes || last.IsZero() || now.Sub(last) >= hazardPublishPeriod(c.cfg.ControlPeriod) ||
		(len(st.Departures) > 0 && st.Departures[len(st.Departures)-1].At.After(st.HazardsAt))
	if !due {
		return
	}
	if _, err := c.applyCommand(state.PublishHazards{At: now, Hazards: hz}); err != nil {
		c.logger.Warn("publish hazards", "err", err)
		return
	}
	c.mu.Lock()
	c.hazardsPublAt = now
	c.mu.Unlock()
}

// hazardPublishPeriod is 60 control periods (a minute by default).
func hazardPublishPeriod(period time.Duration) time.Duration { return 60 * period }

// refreshPeriod is how long decisions that drifted within tolerance wait
// before they are committed anyway: 60 control periods.
func refreshPeriod(period time.Duration) time.Duration { return 60 * period }

// eligibleSnapshot is buildSnapshot with the eligibility rule applied.
func eligibleSnapshot(st *state.State, hz map[policy.NodeID]policy.HazardEstimate, tel Telemetry, unverified map[policy.NodeID]string, params policy.Params, now time.Time) policy.Snapshot {
	snap := buildSnapshot(st, hz, tel, params, now)
	markIneligible(&snap, st, tel, unverified)
	return snap
}

// markIneligible applies the eligibility rule (policy.Ineligible) to every
// node of the snapshot: gossip's liveness, the kill-switch and data
// directory each node reports, the leader's verification of its
// certificate (unverified: node → why not), its reclaim and its load.
func markIneligible(snap *policy.Snapshot, st *state.State, tel Telemetry, unverified map[policy.NodeID]string) {
	live := map[policy.NodeID]NodeTelemetry{}
	status := map[policy.NodeID]MemberStatus{}
	if tel != nil {
		for _, n := range tel.Nodes() {
			live[n.ID] = n
		}
		for _, m := range tel.Members() {
			status[m.ID] = m.Status
		}
	}
	var need int64 // room for the largest checkpoint of a job that runs or waits
	for _, j := range st.Jobs {
		if j.State != policy.JobDone {
			need = max(need, j.CheckpointBytes)
		}
	}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		h := policy.NodeHealth{Alive: true, Verified: true, NeedDisk: need, Load: n.Load, MaxLoad: snap.Params.MaxLoad}
		if s, ok := status[n.ID]; ok && s != MemberAlive && s != MemberSuspect {
			h.Alive = false
		}
		if why, ok := unverified[n.ID]; ok {
			h.Verified, h.Unverified = false, why
		}
		if t, ok := live[n.ID]; ok {
			h.KillSwitch = t.KillSwitch
			h.DiskKnown, h.DataWritable, h.FreeDisk = t.DiskKnown, t.DataWritable, t.FreeDisk
			h.Draining = t.Draining
		}
		_, h.Reclaimed = st.Reclaims[n.ID]
		n.Ineligible = policy.Ineligible(h)
	}
}

// buildSnapshot assembles the policy's view of one control period at now
// from the replicated state, the fresh hazard estimates and live telemetry.
func buildSnapshot(st *state.State, hz map[policy.NodeID]policy.HazardEstimate, tel Telemetry, params policy.Params, now time.Time) policy.Snapshot {
	snap := policy.Snapshot{Params: params, Reclaims: st.SortedReclaims()}
	live := map[policy.NodeID]NodeTelemetry{}
	var progress map[string]state.FlowProgress
	if tel != nil {
		for _, n := range tel.Nodes() {
			live[n.ID] = n
		}
		snap.Links = tel.Links()
		progress = map[string]state.FlowProgress{}
		for _, p := range tel.Flows() {
			// A flow's receiver may report it done too (a bundle that
			// arrived): done wins over a sender that has not seen it yet.
			if old, ok := progress[p.ID]; !ok || !old.Done {
				progress[p.ID] = p
			}
		}
	}
	used := map[policy.NodeID]int{}
	for _, j := range st.Jobs {
		if j.State != policy.JobDone && j.Node != "" {
			used[j.Node] += j.GPUs
		}
	}
	for _, id := range sortedIDs(st.Nodes) {
		n := st.Nodes[id]
		if n.State != state.NodeActive || !n.Admitted {
			continue // only nodes whose certificate the leader verified get work
		}
		free := max(n.GPUs-used[id], 0)
		pn := policy.Node{ID: id, Building: n.Building, GPU: n.GPU, GPUs: n.GPUs, FreeGPUs: free, Storage: n.Storage, Lab: n.Lab, Pool: n.Pool}
		if l, ok := live[id]; ok {
			pn.FreeGPUs = min(free, l.FreeGPUs)
			pn.Load, pn.AccessLink = l.Load, l.AccessLink
			pn.LentUntil = l.LentUntil
		}
		if h, ok := hz[id]; ok {
			pn.Emergency, pn.Departure = h.EmergencyUpper, h.Departure
		}
		_, pn.Leaving = st.Reclaims[id]
		snap.Nodes = append(snap.Nodes, pn)
	}
	var orders []state.JobRecord // jobs waiting for a restore
	for _, j := range st.SortedJobs() {
		if j.State == policy.JobDone {
			continue
		}
		if j.Restore.From != "" && j.Node != "" && j.Node != j.Restore.From {
			orders = append(orders, j)
		}
		pj := j.Job
		pj.Replicas = nil
		if _, live, ok := st.Recoverable(j.ID, j.Node); ok {
			pj.Replicas = live
		}
		if j.State == policy.JobRunning && j.Node != "" {
			pj.Exposure = exposure(st, j, progress, now)
			pj.AtRisk = atRisk(st, j, now)
			pj.Started = j.RunningSince
		}
		pj.Lacking = lackingPaths(st, j)
		pj.BundleBytes, pj.BundleHolders = j.Spec.BundleSize, st.BundleHolders(j)
		snap.Jobs = append(snap.Jobs, pj)
	}
	// Flows carried over from the previous decisions, with their progress.
	handoffBytes := map[policy.JobID]int64{}
	for _, h := range st.Decisions.Handoffs {
		handoffBytes[h.Job] = h.Bytes
	}
	restoring := map[string]bool{} // restore flows the previous decisions hold
	for _, f := range st.Decisions.Flows {
		if strings.HasPrefix(f.ID, policy.RestorePrefix) {
			// A restore is carried while its order stands (below), not
			// because an earlier decision named it.
			if j, ok := st.Jobs[f.Job]; !ok || j.Restore.From != f.From || j.Node != f.To {
				continue
			}
			restoring[f.ID] = true
		}
		remaining := handoffBytes[f.Job]
		j, ok := st.Jobs[f.Job]
		switch {
		case strings.HasPrefix(f.ID, policy.BundlePrefix):
			// A first placement's bundle copy: carried while the job
			// stays on its destination, until its sender reports it done.
			if !ok || j.Node != f.To {
				continue
			}
			remaining = j.Spec.BundleSize
		case ok && remaining == 0:
			remaining = j.CheckpointBytes
		}
		if p, ok := progress[f.ID]; ok {
			if p.Done {
				continue
			}
			remaining = p.Remaining
		}
		snap.Flows = append(snap.Flows, policy.Flow{
			ID: f.ID, Job: f.Job, From: f.From, To: f.To, Class: f.Class, Remaining: remaining,
			Deadline: f.Deadline, Start: f.Start, Rate: f.Rate,
		})
	}
	// Restores still under way that no decision names any more (the
	// placing decision was replaced): the holder keeps pushing from the
	// job's restore order, so P3 must keep counting the copy.
	for _, j := range orders {
		id := policy.RestorePrefix + string(j.ID)
		if restoring[id] {
			continue
		}
		remaining := j.CheckpointBytes
		if cp, ok := st.CheckpointVersion(j.ID, j.Restore.Version); ok {
			remaining = cp.Size
		}
		if p, ok := progress[id]; ok {
			if p.Done {
				continue
			}
			remaining = p.Remaining
		}
		snap.Flows = append(snap.Flows, policy.Flow{ID: id, Job: j.ID, From: j.Restore.From, To: j.Node,
			Class: policy.ClassMigration, Remaining: remaining})
	}
	return snap
}

// exposure is policy.Job.Exposure for a running job, from the replicated
// catalogue and the gossiped transfer progress: the time since the newest
// of the write of the freshest version a live node other than the host
// holds, the write of the host's newest version while its push is in
// flight, and the job's last start on its host. With versions only on the
// host (their other holders left, or the job restarted on the node that
// held its only copy) the job's whole progress is at risk: the time since
// its submission. 0 when nothing is known (records from before the times
// were kept).
func exposure(st *state.State, j state.JobRecord, progress map[string]state.FlowProgress, now time.Time) time.Duration {
	cps := st.Checkpoints[j.ID]
	var base time.Time
	covered := false
	for i := len(cps) - 1; i >= 0 && !covered; i-- {
		for _, h := range cps[i].Holders {
			if h != j.Node && st.Nodes[h].State == state.NodeActive {
				covered, base = true, cps[i].Written
				break
			}
		}
	}
	if p, ok := progress[policy.CheckpointPrefix+string(j.ID)]; ok && !p.Done && p.Remaining > 0 {
		for i := len(cps) - 1; i >= 0; i-- {
			if cps[i].Source == j.Node && slices.Contains(cps[i].Holders, j.Node) {
				covered = true
				if cps[i].Written.After(base) {
					base = cps[i].Written
				}
				break
			}
		}
	}
	if !covered && len(cps) > 0 && !j.Submitted.IsZero() {
		return max(now.Sub(j.Submitted), 0)
	}
	if j.RunningSince.After(base) {
		base = j.RunningSince
	}
	if base.IsZero() {
		return 0
	}
	return max(now.Sub(base), 0)
}

// atRisk is policy.Job.AtRisk for a running job: the time since the
// write of the newest version that a live node other than the host holds
// (what survives the host and every other holder leaving, docs/design.md P2.7), or
// since its submission with no such version (all its progress). 0 when
// the times are unknown.
func atRisk(st *state.State, j state.JobRecord, now time.Time) time.Duration {
	cps := st.Checkpoints[j.ID]
	for i := len(cps) - 1; i >= 0; i-- {
		if !cps[i].Committed || cps[i].Written.IsZero() {
			continue
		}
		for _, h := range cps[i].Holders {
			if h != j.Node && st.Nodes[h].State == state.NodeActive {
				return max(now.Sub(cps[i].Written), 0)
			}
		}
	}
	if j.Submitted.IsZero() {
		return 0
	}
	return max(now.Sub(j.Submitted), 0)
}

func trimCandidates(d *policy.Decisions) {
	for i := range d.Placements {
		if len(d.Placements[i].Candidates) > maxCandidates {
			d.Placements[i].Candidates = d.Placements[i].Candidates[:maxCandidates]
		}
	}
	for i := range d.Handoffs {
		if len(d.Handoffs[i].Candidates) > maxCandidates {
			d.Handoffs[i].Candidates = d.Handoffs[i].Candidates[:maxCandidates]
		}
	}
}

// lackingPaths lists the active nodes that do not announce every host path
// job reads (state.JobSpec.ROPaths), sorted: P2's per-job node filter.
func lackingPaths(st *state.State, j state.JobRecord) []policy.NodeID {
	if len(j.Spec.ROPaths) == 0 {
		return nil
	}
	var out []policy.NodeID
	for _, id := range sortedIDs(st.Nodes) {
		if n := st.Nodes[id]; n.State == state.NodeActive && !n.HasPaths(j.Spec.ROPaths) {
			out = append(out, id)
		}
	}
	return out
}

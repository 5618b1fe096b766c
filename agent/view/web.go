package view

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
	"github.com/reclaimnet/reclaimnet/web"
)

// Web is what the status page, /v1 and /metrics show at now, from one
// copy of the replicated state, the gossip member table and the
// coordinator's configuration. Nothing in the result is shared with the
// node.
func (v *View) Web(now time.Time) web.Status {
	st := web.Status{GeneratedAt: now, Node: policy.NodeID(v.cfg.Node), Version: v.cfg.Version}
	c := v.cfg.Coord
	cs := c.State()
	servers, _ := c.Servers() // an error leaves every role "none"
	st.Cluster.Leader, _ = c.Leader()
	coordStatus := c.Status()
	raftState := coordStatus.RaftState
	st.Cluster.Members = v.webMembers(now, cs, servers, raftState)
	st.Cluster.Hazard = clusterHazard(cs)
	st.Cluster.Bandwidth = buildingBandwidth(v.cfg.Gossip.Links(), v.cfg.Mesh.Members(), v.cfg.Gossip.Uplink)
	st.Cluster.Protocols = v.webProtocols(cs)
	st.Jobs = webJobs(cs)
	st.Reclaims = webReclaims(cs)
	st.Decisions = webDecisions(cs.Decisions)
	st.Control = web.Control{LastTick: cs.Decisions.At, CheckpointBudget: cs.Decisions.CheckpointBudget,
		RefusedDecision: coordStatus.RefusedDecision, RefusedAt: coordStatus.RefusedAt}
	st.Counters = webCounters(cs.Counters)
	st.Transfers = v.webTransfers(cs)
	st.Sandbox = v.cfg.Sandbox
	st.CoDeparture, st.CoDepartureWindow = v.coDeparture(cs, now)
	return st
}

// coDeparture lists the node pairs most likely to leave together, from
// the replicated departure log (the leader's estimator, replayed here).
func (v *View) coDeparture(cs *state.State, now time.Time) ([]web.NodePair, time.Duration) {
	v.coMu.Lock()
	co := v.co.Estimate(cs, now)
	v.coMu.Unlock()
	var out []web.NodePair
	for _, p := range co.Top(web.MaxNodePairs) {
		out = append(out, web.NodePair{A: p.A, B: p.B, P: p.P, Domain: p.Domain.String()})
	}
	return out, co.Window
}

// webCounters maps the replicated counters to the page's and the metrics'.
func webCounters(c state.Counters) web.Counters {
	return web.Counters{AdmittedMigrations: c.AdmittedHandoffs, RejectedMigrations: c.DegradedHandoffs,
		Handoffs: c.Handoffs, DegradedRecoveries: c.DegradedRecoveries}
}

// webRole maps a server of the Raft configuration to the page's role.
// raftState is this node's hashicorp/raft state, which tells a candidate
// from a follower (only for this node: others' states are not known here).
func webRole(s raft.Server, self bool, raftState string) web.RaftRole {
	switch {
	case s.Leader:
		return web.RaftLeader
	case s.Role == state.RoleVoter && self && raftState == "Candidate":
		return web.RaftCandidate
	case s.Role == state.RoleVoter:
		return web.RaftFollower
	case s.Role == state.RoleNonvoter:
		return web.RaftNonvoter
	}
	return web.RaftNone
}

// webMembers lists the gossip members, then registered nodes gossip no
// longer knows (as left or dead), sorted by building and name.
func (v *View) webMembers(now time.Time, cs *state.State, servers []raft.Server, raftState string) []web.Member {
	roles := map[policy.NodeID]web.RaftRole{}
	for _, s := range servers {
		roles[s.ID] = webRole(s, string(s.ID) == v.cfg.Node, raftState)
	}
	role := func(id policy.NodeID) web.RaftRole {
		if r, ok := roles[id]; ok {
			return r
		}
		return web.RaftNone
	}
	hazard := func(m *web.Member) {
		if h, ok := cs.Hazards[m.ID]; ok {
			m.HazardProfile = web.HazardProfile{Rates: append([]float64(nil), h.EmergencyUpper.Rates...)}
			m.Hazard = h.EmergencyUpper.At(now)
		}
	}
	// GPUs the replicated state assigns to jobs, as the leader counts them.
	used := map[policy.NodeID]int{}
	for _, j := range cs.Jobs {
		if j.State != policy.JobDone && j.Node != "" {
			used[j.Node] += j.GPUs
		}
	}
	seen := map[policy.NodeID]bool{}
	var out []web.Member
	for _, gm := range v.cfg.Mesh.Members() {
		id := policy.NodeID(gm.Name)
		seen[id] = true
		m := web.Member{
			ID:       id,
			Building: gm.Meta.Building,
			Addr:     net.JoinHostPort(gm.Addr.String(), strconv.Itoa(int(gm.Port))),
			State:    web.MemberState(gm.State),
			RaftRole: role(id),
			GPU: web.GPU{
				Model:      gm.Meta.GPUModel,
				VRAM:       int64(gm.Meta.GPUVRAMMiB) << 20,
				Capability: float64(gm.Meta.GPUCapability) / 10,
			},
			GPUs:       int(gm.Meta.GPUs),
			FreeGPUs:   int(gm.Meta.GPUs),
			KillSwitch: web.KillSwitchMode(mesh.KillSwitchUnknown.String()),
			Storage:    gm.Meta.Storage,
		}
		m.Lending = memberLending(cs, id, gm.Meta, gm.State != mesh.StateAlive && gm.State != mesh.StateSuspect)
		if gm.HasTelemetry {
			m.FreeGPUs = int(gm.Telemetry.FreeGPUs)
			m.Load = gm.Telemetry.Load
			m.KillSwitch, m.KillSwitchDrops = webKillSwitch(gm.Telemetry)
		}
		// Free: what the node reports, less what jobs hold (the leader's
		// count in its snapshot; node telemetry does not see jobs yet).
		m.FreeGPUs = max(min(m.FreeGPUs, m.GPUs-used[id]), 0)
		if gm.State != mesh.StateAlive && gm.State != mesh.StateSuspect {
			// A gone node's last report is stale: it offers nothing.
			m.FreeGPUs, m.Load = 0, 0
		}
		if _, pending := cs.Reclaims[id]; gm.State == mesh.StateAlive && (pending || (gm.HasTelemetry && gm.Telemetry.Leaving)) {
			m.State = web.MemberLeaving
		}
		hazard(&m)
		m.Eligible, m.IneligibleReason = eligibility(cs, m)
		out = append(out, m)
	}
	for id, n := range cs.Nodes {
		if seen[id] {
			continue
		}
		m := web.Member{ID: id, Building: n.Building, Addr: n.GossipAddr, State: web.MemberDead,
			RaftRole: role(id), GPU: web.WebGPU(n.GPU), GPUs: n.GPUs, KillSwitch: web.KillSwitchMode(mesh.KillSwitchUnknown.String()), Storage: n.Storage}
		if n.State == state.NodeLeft {
			m.State = web.MemberLeft
		}
		m.Lending = departedLending(cs, id, "")
		hazard(&m)
		m.Eligible, m.IneligibleReason = eligibility(cs, m)
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Building != out[j].Building {
			return out[i].Building < out[j].Building
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// eligibility is a member's verdict under the eligibility rule: the
// leader's, from the replicated decisions, for a live registered node.
func eligibility(cs *state.State, m web.Member) (bool, string) {
	switch {
	case m.State != web.MemberAlive && m.State != web.MemberSuspect && m.State != web.MemberLeaving:
		return false, "not alive"
	case cs.NodeIneligible(m.ID) != "":
		return false, cs.NodeIneligible(m.ID)
	case m.State == web.MemberLeaving:
		return false, "leaving"
	}
	rec, ok := cs.Nodes[m.ID]
	if !ok {
		return false, "not registered by the leader yet"
	}
	if !rec.Admitted {
		// Admission (docs/trust.md): the policy never sees such a node.
		return false, "not admitted: " + cmp.Or(rec.Refused, "certificate not verified yet")
	}
	return true, ""
}

// memberLending is the lending the page shows for a gossip member: what
// its metadata publishes while it is alive or suspect, departedLending
// once it has left or failed.
func memberLending(cs *state.State, id policy.NodeID, meta mesh.Meta, departed bool) *web.Lending {
	if departed {
		return departedLending(cs, id, meta.Lending)
	}
	return (*web.Lending)(LendingOf(meta))
}

// departedLending is the lending of a node out of the cluster: its state
// and when it may be lent again as its last departure's report recorded
// them, and its windows as it last announced them (windows, from its last
// gossip metadata, else the registry's). A departed node's gossiped state
// is not used: it is the last one the node published before it left
// ("reclaiming" as its window ended), stale from then on. Gossip forgets
// a departed member after a while; the replicated registry and history
// do not. Nil when none of them says anything.
func departedLending(cs *state.State, id policy.NodeID, windows string) *web.Lending {
	var l web.Lending
	for i := len(cs.ReclaimReports) - 1; i >= 0; i-- {
		if r := cs.ReclaimReports[i]; r.Node == id {
			l.State, l.From = r.LendingAfter, r.LendableFrom
			break
		}
	}
	l.Windows = cmp.Or(windows, cs.Nodes[id].Lending)
	if l == (web.Lending{}) {
		return nil
	}
	return &l
}

// webKillSwitch is a member's kill-switch as its last report says:
// off/soft/hard from the kernel, "disabled" where the node runs without
// kernel enforcement (never shown as a fake "off"), "unknown" where the
// report lacks it (an older node) or the node could not read it. The
// page's Prometheus state set knows only off/soft/hard, so the two extra
// values set none of them.
func webKillSwitch(t mesh.Telemetry) (web.KillSwitchMode, uint64) {
	return web.KillSwitchMode(t.KillSwitch.String()), t.KillSwitchDrops
}

// clusterHazard is the mean of the active nodes' published λ̂⁺ profiles,
// bucket by bucket (the cluster-wide time-of-day profile the page charts).
func clusterHazard(cs *state.State) web.HazardProfile {
	var sum []float64
	n := 0
	for id, h := range cs.Hazards {
		if rec, ok := cs.Nodes[id]; ok && rec.State != state.NodeActive {
			continue
		}
		r := h.EmergencyUpper.Rates
		if len(r) == 0 {
			continue
		}
		if sum == nil {
			sum = make([]float64, len(r))
		}
		if len(r) != len(sum) {
			continue // another bucket count: not comparable
		}
		for k, v := range r {
			sum[k] += v
		}
		n++
	}
	for k := range sum {
		sum[k] /= float64(n)
	}
	return web.HazardProfile{Rates: sum}
}

// buildingBandwidth is the matrix between buildings on the campus graph
// the leader plans with (Gossip.Links: access links per node,
// one uplink per building; measured where reported, default capacity
// where not). Between two buildings the path is both uplinks; within a
// building it is two access links, taken conservatively as the smallest.
// Each figure says what it rests on: an access link is measured when its
// node reports bandwidth; an uplink is never measured, so a figure
// between buildings is the operator's declared capacity (declared, when
// both uplinks are) or a default (assumed).
func buildingBandwidth(links []policy.Link, members []mesh.Member, declared func(string) (float64, bool)) []web.BuildingBandwidth {
	uplink := map[string]policy.Link{}
	access := map[string]policy.Link{}
	for _, l := range links {
		if l.B == "core" {
			uplink[l.A] = l
		}
	}
	nodeBuilding := map[string]string{}
	measured := map[string]bool{} // access links by node
	for _, m := range members {
		nodeBuilding[m.Name] = m.Meta.Building
		measured[m.Name] = m.HasTelemetry && len(m.Telemetry.Bandwidth) > 0
	}
	uplinkBasis := func(b string) string {
		if declared != nil {
			if _, ok := declared(b); ok {
				return web.BandwidthDeclared
			}
		}
		return web.BandwidthAssumed
	}
	for _, l := range links {
		b, ok := nodeBuilding[l.A]
		if !ok || l.B != "building/"+b {
			continue
		}
		v := "building/" + b
		if cur, ok := access[v]; !ok || l.Available < cur.Available {
			access[v] = l
		}
	}
	var buildings []string
	for v := range uplink {
		buildings = append(buildings, v)
	}
	sort.Strings(buildings)
	var out []web.BuildingBandwidth
	for _, from := range buildings {
		for _, to := range buildings {
			var e web.BuildingBandwidth
			if from == to {
				l, ok := access[from]
				if !ok {
					continue
				}
				e = web.BuildingBandwidth{Available: l.Available, AvailableLow: l.AvailableLow, Capacity: l.Capacity, Basis: web.BandwidthAssumed}
				if measured[l.A] {
					e.Basis = web.BandwidthMeasured
				}
			} else {
				a, b := uplink[from], uplink[to]
				e = web.BuildingBandwidth{Available: min(a.Available, b.Available),
					AvailableLow: min(a.AvailableLow, b.AvailableLow), Capacity: min(a.Capacity, b.Capacity), Basis: web.BandwidthAssumed}
				if uplinkBasis(strip(from)) == web.BandwidthDeclared && uplinkBasis(strip(to)) == web.BandwidthDeclared {
					e.Basis = web.BandwidthDeclared
				}
			}
			e.From, e.To = strip(from), strip(to)
			out = append(out, e)
		}
	}
	return out
}

func strip(vertex string) string {
	if len(vertex) > len("building/") {
		return vertex[len("building/"):]
	}
	return ""
}

// webJobs lists the jobs with P1's decision and their freshest committed
// checkpoint.
func webJobs(cs *state.State) []web.Job {
	decisions := map[policy.JobID]policy.JobDecision{}
	for _, d := range cs.Decisions.Jobs {
		decisions[d.Job] = d
	}
	var out []web.Job
	for _, j := range cs.Jobs {
		wj := web.Job{
			ID:              j.ID,
			State:           j.StateName(),
			UnderWay:        cs.UnderWay(j.ID),
			Reason:          cs.PendingReason(j.ID),
			Node:            j.Node,
			GPUs:            j.GPUs,
			CheckpointBytes: j.CheckpointBytes,
			LossBudget:      j.LossBudget,
			Standby:         j.Standby,
			StandbyHas:      j.StandbyHas,
			Restarts:        j.Restarts,
			Replicas:        j.Copies,
			Failures:        j.Failures,
			MaxFailures:     j.MaxFailures,
			EndedAt:         j.End.At,
			CancelledBy:     j.End.By,
			BundleBytes:     j.Spec.BundleSize,
		}
		if cp, until, ok := cs.Results(j.ID); ok {
			wj.Results = &web.Results{Version: cp.Version, Holders: cp.Holders, KeptUntil: until}
		}
		if wj.Replicas == 0 {
			wj.Replicas = policy.DefaultCopies
		}
		if x := j.LastExit; x != nil {
			wj.LastExit = &web.JobExit{Node: x.Node, At: x.At, ExitCode: x.ExitCode, Signal: x.Signal, Reason: x.Reason,
				Description: x.Describe(), LogTail: slices.Clone(x.LogTail)}
		}
		if d, ok := decisions[j.ID]; ok {
			wj.Decision = web.WebJobDecision(d)
		}
		if c, ok := cs.FreshestCommitted(j.ID); ok {
			wj.LastCheckpoint = &web.Checkpoint{Version: c.Version, Bytes: c.Size, CommittedAt: c.CommittedAt,
				Holders: append([]policy.NodeID(nil), c.Holders...)}
		}
		out = append(out, wj)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// webReclaims lists the pending reclaims with the jobs on their nodes.
func webReclaims(cs *state.State) web.Reclaims {
	var r web.Reclaims
	for node, rc := range cs.Reclaims {
		p := web.PendingReclaim{Reclaim: web.WebReclaim(rc)}
		for _, j := range cs.Jobs {
			if j.Node == node && j.State != policy.JobDone {
				p.Jobs = append(p.Jobs, j.ID)
			}
		}
		sort.Slice(p.Jobs, func(i, k int) bool { return p.Jobs[i] < p.Jobs[k] })
		r.Pending = append(r.Pending, p)
	}
	sort.Slice(r.Pending, func(i, j int) bool { return r.Pending[i].Reclaim.Deadline.Before(r.Pending[j].Reclaim.Deadline) })
	// History: the replicated reclaim history, newest first: owners'
	// reports (an emergency's arrives when its agent had time to send it,
	// or when it starts again), departures found by failure detection,
	// and what the cluster did with each job.
	for i := len(cs.ReclaimReports) - 1; i >= 0; i-- {
		r.History = append(r.History, webReclaimRecord(cs.ReclaimReports[i]))
	}
	return r
}

// outcomeDowntime is how long a job of a reclaim computed nowhere: from
// a hand-off's stop on the node, or for a recovery from the departure
// (the command, for an emergency reclaim: it stops the jobs at once), to
// its readiness on the new node. With a destination but no readiness yet
// the job is resuming.
func outcomeDowntime(rep state.ReclaimReport, o state.JobOutcome) (time.Duration, bool) {
	start := rep.DowntimeStart(o)
	switch {
	case o.To == "":
		return 0, false
	case o.Resumed.IsZero():
		return 0, true
	case start.IsZero() || o.Resumed.Before(start):
		return 0, false // not known (an older node), or clocks apart
	}
	return o.Resumed.Sub(start), false
}

// webReclaimRecord maps one replicated reclaim report to the page's
// record: the node was released when its jobs had all left (or when it
// left, if that came first).
func webReclaimRecord(rep state.ReclaimReport) web.ReclaimRecord {
	released := rep.Completed
	if !rep.Left.IsZero() && (released.IsZero() || rep.Left.Before(released)) {
		released = rep.Left
	}
	rec := web.ReclaimRecord{
		Reclaim:     web.Reclaim{Node: rep.Node, Announced: rep.Announced, Deadline: rep.Deadline},
		Released:    released,
		OnTime:      !released.IsZero() && !released.After(rep.Deadline),
		Detected:    rep.Detected,
		OwnerReport: !rep.ClusterOnly,
		Graceful:    rep.Graceful,
	}
	// The cluster's record of each job (destination, replica, lost work)
	// comes first; the owner's lists add the jobs it does not cover.
	seen := map[policy.JobID]bool{}
	for _, o := range rep.Jobs {
		seen[o.Job] = true
		rec.Jobs = append(rec.Jobs, webOutcome(rep, o))
	}
	add := func(o web.ReclaimOutcome) {
		if !seen[o.Job] {
			seen[o.Job] = true
			rec.Jobs = append(rec.Jobs, o)
		}
	}
	for _, j := range rep.Moved {
		add(web.ReclaimOutcome{Job: j, FinalCheckpoint: true})
	}
	for _, j := range rep.Degraded {
		add(web.ReclaimOutcome{Job: j, Degraded: true, Reason: "not handed off before the node left: recovers from its freshest committed replica"})
	}
	for _, j := range rep.Finished {
		add(web.ReclaimOutcome{Job: j, Reason: "finished"})
	}
	return rec
}

// webOutcome is the page's figures for one job of a reclaim: where it
// went, what it lost, its downtime against its limit and where the
// downtime went.
func webOutcome(rep state.ReclaimReport, o state.JobOutcome) web.ReclaimOutcome {
	out := web.ReclaimOutcome{Job: o.Job, To: o.To, Replica: o.Replica, Version: o.Version, WorkLost: o.LostWork}
	out.Downtime, out.Resuming = outcomeDowntime(rep, o)
	if out.Downtime > 0 {
		out.DowntimeLimit = o.Limit
		out.Detection, out.Placement, out.Restore, out.Start = downtimeParts(rep.DowntimeStart(o), o)
	}
	switch {
	case o.HandedOff && o.NoFinalCheckpoint:
		out.Degraded = true
		out.Reason = fmt.Sprintf("handed off without its final checkpoint: resumed from committed version v%d", o.Version)
	case o.HandedOff:
		out.FinalCheckpoint = true
	case o.Replica != "":
		out.Degraded = true
		out.Reason = "recovered from the freshest committed replica"
	default:
		out.Degraded = true
		out.Reason = "no replica survived: restarted from the beginning"
	}
	return out
}

// webDecisions lists the current hand-offs and placements with their
// ranked candidates.
func webDecisions(rec state.DecisionRecord) []web.Decision {
	var out []web.Decision
	for _, h := range rec.Handoffs {
		out = append(out, web.Decision{At: rec.At, Kind: web.DecisionHandoff, Handoff: web.WebHandoff(h)})
	}
	for _, p := range rec.Placements {
		out = append(out, web.Decision{At: rec.At, Kind: web.DecisionPlacement, Placement: web.WebPlacement(p)})
	}
	return out
}

// webProtocols is the page's protocol line: the settings in force (the
// leader's) and this node's own.
func (v *View) webProtocols(cs *state.State) web.Protocols {
	in := cs.Protocols()
	return web.Protocols{
		P1: in.Switches.P1, P2: in.Switches.P2, P3: in.Switches.P3,
		FixedInterval: in.FixedInterval,
		Summary:       in.String(),
		DecidedBy:     cs.Decisions.Leader,
		Local:         v.cfg.Protocols.String(),
		Agree:         in == v.cfg.Protocols,
	}
}

// webTransfers is the status page's transfer section: this node's
// outgoing transfers, with the admitted flow where there is one.
func (v *View) webTransfers(cs *state.State) []web.Transfer {
	me := policy.NodeID(v.cfg.Node)
	out := []web.Transfer{}
	for _, tv := range v.cfg.Jobs.Transfers() {
		if tv.Done {
			continue
		}
		assigned := tv.AssignedRate
		if assigned >= transfer.Unlimited {
			assigned = 0 // the page shows an unpaced transfer's rate as 0
		}
		flow := policy.FlowDecision{ID: tv.Flow, Job: tv.Job, From: me, To: tv.To, Class: tv.Class, Rate: assigned}
		if f, ok := cs.Flow(tv.Flow); ok && f.From == me && f.To == tv.To {
			flow = f
		}
		if !cs.Protocols().Switches.P3 {
			// P3 off: unpaced and without a kernel ceiling, whatever the
			// leader's max-min share was.
			flow.Rate, flow.Ceiling, flow.Burst = assigned, 0, 0
		}
		out = append(out, web.Transfer{Flow: web.WebFlow(flow), Class: tv.Class.String(), Achieved: tv.AchievedRate,
			BytesDone: tv.BytesDone, BytesTotal: tv.BytesTotal})
	}
	return out
}

// downtimeParts splits a move's downtime from its start (design P3.8d): a
// recovery's from its departure to detection, placement, restore and
// first step; a hand-off's (no detection or placement) from its final
// checkpoint to the restore on the destination and its first step.
func downtimeParts(from time.Time, o state.JobOutcome) (detection, placement, restore, start time.Duration) {
	mark := from
	step := func(t time.Time) time.Duration {
		if t.IsZero() || t.Before(mark) {
			return 0
		}
		d := t.Sub(mark)
		mark = t
		return d
	}
	if !o.HandedOff {
		detection = step(o.Detected)
		placement = step(o.At)
	}
	restore = step(o.Restored)
	start = step(o.Resumed)
	return detection, placement, restore, start
}

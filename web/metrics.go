package web

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reclaimnet/reclaimnet/policy"
)

// metricsNamespace prefixes every metric name.
const metricsNamespace = "reclaimnet"

// metric is one documented metric: its description and whether it is a
// counter. docs/metrics.md lists the same names, types and labels.
type metric struct {
	desc    *prometheus.Desc
	counter bool
}

func newMetric(name, help string, counter bool, labels ...string) metric {
	return metric{desc: prometheus.NewDesc(metricsNamespace+"_"+name, help, labels, nil), counter: counter}
}

// The metrics, all read from one Status per scrape. The first four are
// the node's own; the others are cluster-wide figures of the replicated
// state and the gossiped telemetry, which only the leader exports
// (collectCluster).
var (
	mStatusUp    = newMetric("status_up", "1 when the agent could read its status for this scrape, 0 when not (then no other reclaimnet metric is present).", false)
	mGeneratedAt = newMetric("status_generated_timestamp_seconds", "When the status these metrics come from was taken, Unix seconds.", false)

	mRaftRole  = newMetric("raft_role", "This node's Raft role: 1 for the current role, 0 for the others (none = gossip-only).", false, "role")
	mHasLeader = newMetric("raft_has_leader", "1 when the cluster has a Raft leader, else 0.", false)
	mMembers   = newMetric("members", "Members by building and gossip state.", false, "building", "state")
	mGPUs      = newMetric("node_gpus", "GPUs of a node.", false, "node", "building")
	mFreeGPUs  = newMetric("node_free_gpus", "GPUs of a node not used by ReclaimNet jobs.", false, "node", "building")
	mLoad      = newMetric("node_load_ratio", "Load of a node, 0..1.", false, "node", "building")
	mEligible  = newMetric("node_eligible", "1 when a node may take jobs, standbys and copies (the leader's eligibility rule), else 0.", false, "node", "building")
	mHazard    = newMetric("node_hazard_per_second", "A node's current emergency hazard upper bound λ̂⁺, events per second.", false, "node", "building")
	mKillMode  = newMetric("killswitch_mode", "A node's kill-switch: 1 for its current mode (off, soft, hard), 0 for the others.", false, "node", "mode")
	mKillDrops = newMetric("killswitch_drops_total", "Packets a node's kill-switch dropped since its agent started.", true, "node")

	mBandwidth    = newMetric("bandwidth_available_bytes_per_second", "Smoothed bandwidth available to migration from one building to another, bytes per second; basis measured, declared or assumed (a default nobody measured).", false, "from_building", "to_building", "basis")
	mBandwidthLow = newMetric("bandwidth_available_low_bytes_per_second", "Lower confidence bound of the bandwidth available to migration between buildings, bytes per second.", false, "from_building", "to_building", "basis")
	mBandwidthCap = newMetric("bandwidth_capacity_bytes_per_second", "Configured or probed capacity between buildings, bytes per second (absent when unknown).", false, "from_building", "to_building", "basis")
	mCkptBudget   = newMetric("checkpoint_budget_bytes_per_second", "Checkpoint budget Bckpt that P3 left for P1 in the last control period, bytes per second.", false)

	mJobs          = newMetric("jobs", "Jobs by state.", false, "state")
	mJobsUnderWay  = newMetric("jobs_under_way", "Jobs by what is under way beside their state (checkpointing, restoring, handing off, recovering).", false, "activity")
	mJobInterval   = newMetric("job_checkpoint_interval_seconds", "A job's checkpoint interval Δ chosen by P1, seconds.", false, "job_id")
	mJobBandwidth  = newMetric("job_checkpoint_bandwidth_bytes_per_second", "A job's checkpoint bandwidth b chosen by P1, bytes per second.", false, "job_id")
	mJobHazard     = newMetric("job_hazard_per_second", "The hazard λ̂⁺ P1 used for a job, events per second.", false, "job_id")
	mJobInfeasible = newMetric("job_loss_budget_infeasible", "1 when the network cannot checkpoint a job often enough to meet its loss budget, else 0.", false, "job_id")
	mJobFloor      = newMetric("job_interval_floor_seconds", "The network floor C/(β·b) of a job's interval box (P1.5), seconds.", false, "job_id")
	mJobCeiling    = newMetric("job_interval_ceiling_seconds", "The loss-budget ceiling 2·Lmax of a job's interval box (P1.5), seconds (absent without a loss budget).", false, "job_id")
	mJobUnmet      = newMetric("job_loss_budget_unmet", "1 when a job's interval floor C/(β·b) is above its ceiling 2·Lmax (its loss budget cannot be met at its bandwidth), else 0.", false, "job_id")
	mJobReplicas   = newMetric("job_replicas", "k, how many nodes other than the host should hold a job's freshest committed checkpoint.", false, "job_id")
	mJobHolders    = newMetric("job_holders", "Nodes P2 keeps a job's freshest committed checkpoint on (P2.7).", false, "job_id")
	mJobHolderRisk = newMetric("job_holder_risk_ratio", "The chance that every holder of a job's freshest checkpoint leaves within its restore window when the host leaves (P2.7).", false, "job_id")
	mJobCkptAge    = newMetric("job_checkpoint_age_seconds", "Age of a job's last committed checkpoint, seconds (absent before the first).", false, "job_id")
	mJobRestarts   = newMetric("job_restarts_total", "Restarts of a job (moves and recoveries).", true, "job_id")

	mXferAssigned = newMetric("transfer_assigned_bytes_per_second", "Rate P3 assigned to a job's transfers in flight of one class, summed, bytes per second.", false, "job_id", "class")
	mXferAchieved = newMetric("transfer_achieved_bytes_per_second", "Rate a job's transfers in flight of one class achieved recently, summed, bytes per second.", false, "job_id", "class")
	mXferDone     = newMetric("transfer_done_bytes", "Bytes a job's transfers in flight of one class have moved.", false, "job_id", "class")
	mXferSize     = newMetric("transfer_size_bytes", "Bytes a job's transfers in flight of one class move in all.", false, "job_id", "class")
	mXferLeft     = newMetric("transfer_time_left_seconds", "Estimated time the slowest of a job's transfers in flight of one class still needs at its achieved rate, seconds (absent before a rate is measured).", false, "job_id", "class")
	mXferDeadline = newMetric("transfer_until_deadline_seconds", "Time until the earliest deadline of a job's transfers in flight of one class, seconds (absent for pre-sync and periodic checkpoints).", false, "job_id", "class")

	mReclaimsPending = newMetric("reclaims_pending", "Reclaims whose node has not left yet.", false)
	mReclaimLeft     = newMetric("reclaim_remaining_seconds", "Time until a pending reclaim's node leaves, seconds.", false, "node", "kind")
	mAdmissions      = newMetric("admissions_total", "Hand-off decisions with a destination (admitted) or marked degraded (rejected).", true, "result")
	mHandoffs        = newMetric("handoffs_total", "Completed hand-offs with their final checkpoint.", true)
	mDegraded        = newMetric("degraded_recoveries_total", "Jobs that resumed from an older version instead of a loss-free hand-off.", true)
)

// allMetrics lists every metric, for Describe and the documentation test.
var allMetrics = []metric{
	mStatusUp, mGeneratedAt,
	mRaftRole, mHasLeader, mMembers, mGPUs, mFreeGPUs, mLoad, mEligible, mHazard, mKillMode, mKillDrops,
	mBandwidth, mBandwidthLow, mBandwidthCap, mCkptBudget,
	mJobs, mJobsUnderWay, mJobInterval, mJobBandwidth, mJobHazard, mJobInfeasible, mJobFloor, mJobCeiling, mJobUnmet,
	mJobReplicas, mJobHolders, mJobHolderRisk, mJobCkptAge, mJobRestarts,
	mXferAssigned, mXferAchieved, mXferDone, mXferSize, mXferLeft, mXferDeadline,
	mReclaimsPending, mReclaimLeft, mAdmissions, mHandoffs, mDegraded,
}

// jobStates lists every job state name (state.JobRecord.StateName), so the
// jobs gauge has a stable set of series.
var jobStates = []string{"pending", "running", "migrating", "recovering", "done", "failed", "cancelled"}

// UnderWays lists what can be under way for a job (Job.UnderWay, the
// values of state.UnderWay), so the gauge has a stable set of series.
var UnderWays = []string{"checkpointing", "restoring", "handing off", "recovering"}

// collector turns one Status per scrape into metrics.
type collector struct {
	status func(context.Context) (Status, error)
	log    *slog.Logger
}

func newCollector(status func(context.Context) (Status, error), log *slog.Logger) *collector {
	return &collector{status: status, log: log}
}

// Describe sends every metric's description.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range allMetrics {
		ch <- m.desc
	}
}

// Collect reads the status once and emits every metric from it.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.status(context.Background())
	if err != nil {
		c.log.Warn("web: metrics: status unavailable", "err", err)
		emit(ch, mStatusUp, 0)
		return
	}
	emit(ch, mStatusUp, 1)
	collectStatus(ch, &s)
}

// emit sends one sample.
func emit(ch chan<- prometheus.Metric, m metric, v float64, labels ...string) {
	t := prometheus.GaugeValue
	if m.counter {
		t = prometheus.CounterValue
	}
	ch <- prometheus.MustNewConstMetric(m.desc, t, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectStatus emits everything but status_up from a prepared status:
// the node's own figures always, the cluster-wide ones only on the Raft
// leader (every agent holds the same replicated state and gossip, so one
// exporter keeps sums over agents right).
func collectStatus(ch chan<- prometheus.Metric, s *Status) {
	emit(ch, mGeneratedAt, float64(s.GeneratedAt.UnixNano())/1e9)
	self := RaftNone
	for _, m := range s.Cluster.Members {
		if m.ID == s.Node && m.RaftRole != "" {
			self = m.RaftRole
		}
	}
	for _, r := range raftRoles {
		emit(ch, mRaftRole, b2f(r == self), string(r))
	}
	emit(ch, mHasLeader, b2f(s.Cluster.Leader != ""))
	if self == RaftLeader {
		collectCluster(ch, s)
	}
}

// collectCluster emits the cluster-wide figures.
func collectCluster(ch chan<- prometheus.Metric, s *Status) {
	type bs struct{ building, state string }
	members := map[bs]int{}
	for _, m := range s.Cluster.Members {
		members[bs{m.Building, string(m.State)}]++
		emit(ch, mGPUs, float64(m.GPUs), string(m.ID), m.Building)
		emit(ch, mFreeGPUs, float64(m.FreeGPUs), string(m.ID), m.Building)
		emit(ch, mLoad, m.Load, string(m.ID), m.Building)
		emit(ch, mEligible, b2f(m.Eligible), string(m.ID), m.Building)
		emit(ch, mHazard, m.Hazard, string(m.ID), m.Building)
		mode := m.KillSwitch
		if mode == "" {
			mode = KillSwitchOff
		}
		for _, k := range killSwitchModes {
			emit(ch, mKillMode, b2f(k == mode), string(m.ID), string(k))
		}
		emit(ch, mKillDrops, float64(m.KillSwitchDrops), string(m.ID))
	}
	for k, n := range members {
		emit(ch, mMembers, float64(n), k.building, k.state)
	}

	for _, b := range s.Cluster.Bandwidth {
		emit(ch, mBandwidth, b.Available, b.From, b.To, b.Basis)
		emit(ch, mBandwidthLow, b.AvailableLow, b.From, b.To, b.Basis)
		if b.Capacity > 0 {
			emit(ch, mBandwidthCap, b.Capacity, b.From, b.To, b.Basis)
		}
	}
	emit(ch, mCkptBudget, s.Control.CheckpointBudget)

	byState, underWay := map[string]int{}, map[string]int{}
	for _, j := range s.Jobs {
		byState[j.State]++
		if j.UnderWay != "" {
			underWay[j.UnderWay]++
		}
		if j.State == policy.JobDone.String() {
			continue // a finished job's series end with it
		}
		id := string(j.ID)
		if d := j.Decision; d != nil {
			emit(ch, mJobInterval, d.Interval.Seconds(), id)
			emit(ch, mJobBandwidth, d.Bandwidth, id)
			emit(ch, mJobHazard, d.Hazard, id)
			emit(ch, mJobInfeasible, b2f(d.LossBudgetInfeasible), id)
			emit(ch, mJobHolders, float64(len(d.Holders)), id)
			emit(ch, mJobHolderRisk, d.Risk, id)
		}
		if b := j.Box; b != nil {
			emit(ch, mJobFloor, b.Floor.Seconds(), id)
			if b.Ceiling > 0 {
				emit(ch, mJobCeiling, b.Ceiling.Seconds(), id)
			}
			emit(ch, mJobUnmet, b2f(b.BudgetUnmet), id)
		}
		emit(ch, mJobReplicas, float64(j.Replicas), id)
		if c := j.LastCheckpoint; c != nil {
			emit(ch, mJobCkptAge, c.Age.Seconds(), id)
		}
		emit(ch, mJobRestarts, float64(j.Restarts), id)
	}
	for _, st := range jobStates {
		emit(ch, mJobs, float64(byState[st]), st)
		delete(byState, st)
	}
	for st, n := range byState { // states policy does not name (a newer agent)
		emit(ch, mJobs, float64(n), st)
	}
	for _, a := range UnderWays {
		emit(ch, mJobsUnderWay, float64(underWay[a]), a)
	}

	for _, x := range groupTransfers(s.Transfers) {
		l := []string{string(x.job), x.class}
		emit(ch, mXferAssigned, x.assigned, l...)
		emit(ch, mXferAchieved, x.achieved, l...)
		emit(ch, mXferDone, float64(x.done), l...)
		emit(ch, mXferSize, float64(x.size), l...)
		if x.timeLeft != nil {
			emit(ch, mXferLeft, x.timeLeft.Seconds(), l...)
		}
		if x.untilDeadline != nil {
			emit(ch, mXferDeadline, x.untilDeadline.Seconds(), l...)
		}
	}

	emit(ch, mReclaimsPending, float64(len(s.Reclaims.Pending)))
	for _, p := range s.Reclaims.Pending {
		kind := "scheduled"
		if p.Emergency {
			kind = "emergency"
		}
		emit(ch, mReclaimLeft, p.Remaining.Seconds(), string(p.Reclaim.Node), kind)
	}
	emit(ch, mAdmissions, float64(s.Counters.AdmittedMigrations), "admitted")
	emit(ch, mAdmissions, float64(s.Counters.RejectedMigrations), "rejected")
	emit(ch, mHandoffs, float64(s.Counters.Handoffs))
	emit(ch, mDegraded, float64(s.Counters.DegradedRecoveries))
}

// transferSeries is one job's transfers in flight of one class, the unit
// of the transfer metrics: flow IDs would be an unbounded label.
type transferSeries struct {
	job                     policy.JobID
	class                   string
	assigned, achieved      float64
	done, size              int64
	timeLeft, untilDeadline *time.Duration
}

// groupTransfers groups transfers by job and class, in first-seen order:
// rates and bytes add up, the time left is the slowest one's and the
// deadline the earliest.
func groupTransfers(ts []Transfer) []transferSeries {
	var out []transferSeries
	index := map[[2]string]int{}
	for _, t := range ts {
		k := [2]string{string(t.Flow.Job), t.Class}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, transferSeries{job: t.Flow.Job, class: t.Class})
		}
		x := &out[i]
		x.assigned += t.Flow.Rate
		x.achieved += t.Achieved
		x.done += t.BytesDone
		x.size += t.BytesTotal
		if t.TimeLeft != nil && (x.timeLeft == nil || *t.TimeLeft > *x.timeLeft) {
			x.timeLeft = t.TimeLeft
		}
		if t.UntilDeadline != nil && (x.untilDeadline == nil || *t.UntilDeadline < *x.untilDeadline) {
			x.untilDeadline = t.UntilDeadline
		}
	}
	return out
}

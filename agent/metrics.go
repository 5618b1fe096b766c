package agent

import (
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/agent/reclaim"
	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
)

// Registry is the agent's own Prometheus registry (several agents can
// share a test process); subsystems register their collectors on it. The
// status page's collector (web: the reclaimnet_* cluster metrics, Raft
// role included) is registered on it too and serves it at /metrics.
// docs/metrics.md lists every metric.
func (a *Agent) Registry() *prometheus.Registry { return a.registry }

// histograms are the durations this node measures itself.
type histograms struct {
	checkpointWrite prometheus.Observer
	transfer        *prometheus.HistogramVec // by traffic class
	handoffDowntime prometheus.Observer
	isolate         *prometheus.HistogramVec // by kill-switch mode
}

// transferClasses are the classes a push carries, pre-created so that
// every class has its series from the first scrape.
var transferClasses = []policy.TrafficClass{policy.ClassPresync, policy.ClassMigration, policy.ClassEmergency}

func (a *Agent) newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"node": a.cfg.Name}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "reclaimnet", Name: name, Help: help, ConstLabels: labels}, f))
	}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "reclaimnet", Name: name, Help: help, ConstLabels: labels}, f))
	}
	histogram := func(name, help string, buckets []float64, label ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "reclaimnet", Name: name, Help: help, ConstLabels: labels, Buckets: buckets}, label)
		reg.MustRegister(h)
		return h
	}
	gauge("gossip_members", "Alive gossip members, this node included.", func() float64 { return float64(a.mesh.Stats().Members) })
	counter("gossip_events_dropped_total", "Membership events dropped because the agent lagged.", func() float64 { return float64(a.mesh.Stats().EventsDropped) })
	counter("gossip_reports_accepted_total", "Telemetry reports from peers that replaced older ones.", func() float64 { return float64(a.mesh.Stats().ReportsAccepted) })
	counter("gossip_reports_bad_total", "Malformed gossip messages and state from peers.", func() float64 { return float64(a.mesh.Stats().ReportsBad) })
	gauge("agent_start_time_seconds", "When the agent started, Unix seconds.", func() float64 { return float64(a.started.Unix()) })
	reg.MustRegister(buildInfo(labels))

	// Seconds: 10 ms to about 3 min for writes and transfers, 10 µs to
	// about 2.6 s for the kill-switch, 100 ms to about 14 min of downtime.
	slow := prometheus.ExponentialBuckets(0.01, 2, 15)
	a.hist = histograms{
		checkpointWrite: histogram("checkpoint_write_duration_seconds", "Time to store one checkpoint in this node's store (chunking, compression, fsync), seconds.", slow).WithLabelValues(),
		transfer:        histogram("transfer_duration_seconds", "Time of one completed checkpoint push from this node, start to the receiver's commit, by traffic class, seconds.", slow, "class"),
		handoffDowntime: histogram("handoff_downtime_seconds", "Time a job handed off to this node computed nowhere: from its stop on the source to its readiness here, seconds.", prometheus.ExponentialBuckets(0.1, 2, 14)).WithLabelValues(),
		isolate:         histogram("killswitch_isolate_duration_seconds", "Time for this node's kernel kill-switch to take a soft or hard mode once ordered, by mode, seconds.", prometheus.ExponentialBuckets(1e-5, 4, 10), "mode"),
	}
	for _, c := range transferClasses {
		a.hist.transfer.WithLabelValues(c.String())
	}
	for _, m := range []bpf.Mode{bpf.ModeSoft, bpf.ModeHard} {
		a.hist.isolate.WithLabelValues(m.String())
	}
	reg.MustRegister(collectors.NewGoCollector())
	return reg
}

// buildInfo is the constant reclaimnet_build_info: 1, with the version,
// the VCS revision (when the binary was built from a checkout) and the Go
// version as labels, for joining onto other series.
func buildInfo(labels prometheus.Labels) prometheus.Collector {
	revision := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	l := prometheus.Labels{"version": Version, "revision": revision, "goversion": runtime.Version()}
	for k, v := range labels {
		l[k] = v
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "reclaimnet", Name: "build_info",
		Help: "1, labelled with the agent's version, VCS revision and Go version.", ConstLabels: l})
	g.Set(1)
	return g
}

// jobObservers feeds the job manager's measurements into the histograms.
func (h histograms) jobObservers() jobs.Observers {
	return jobs.Observers{
		CheckpointWrite: func(d time.Duration) { h.checkpointWrite.Observe(d.Seconds()) },
		Transfer: func(c policy.TrafficClass, d time.Duration) {
			h.transfer.WithLabelValues(c.String()).Observe(d.Seconds())
		},
		HandoffDowntime: func(d time.Duration) { h.handoffDowntime.Observe(d.Seconds()) },
	}
}

// timedSwitch is the node's kill-switch with the time each isolating
// order takes recorded.
type timedSwitch struct {
	inner   reclaim.KillSwitch
	isolate *prometheus.HistogramVec
}

func (s timedSwitch) Enabled() bool                              { return s.inner.Enabled() }
func (s timedSwitch) KillSwitch() (mesh.KillSwitchState, uint64) { return s.inner.KillSwitch() }

func (s timedSwitch) SetKillSwitch(mode bpf.Mode) error {
	start := time.Now()
	if err := s.inner.SetKillSwitch(mode); err != nil {
		return err
	}
	if mode != bpf.ModeOff {
		s.isolate.WithLabelValues(mode.String()).Observe(time.Since(start).Seconds())
	}
	return nil
}

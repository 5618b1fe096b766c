package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Registry is the agent's own Prometheus registry (several agents can
// share a test process); subsystems register their collectors on it. The
// status page's collector (web: the reclaimnet_* cluster metrics, Raft
// role included) is registered on it too and serves it at /metrics.
func (a *Agent) Registry() *prometheus.Registry { return a.registry }

func (a *Agent) newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"node": a.cfg.Name}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "reclaimnet", Name: name, Help: help, ConstLabels: labels}, f))
	}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "reclaimnet", Name: name, Help: help, ConstLabels: labels}, f))
	}
	gauge("gossip_members", "Alive gossip members, this node included.", func() float64 { return float64(a.mesh.Stats().Members) })
	counter("gossip_events_dropped_total", "Membership events dropped because the agent lagged.", func() float64 { return float64(a.mesh.Stats().EventsDropped) })
	counter("gossip_reports_accepted_total", "Telemetry reports from peers that replaced older ones.", func() float64 { return float64(a.mesh.Stats().ReportsAccepted) })
	counter("gossip_reports_bad_total", "Malformed gossip messages and state from peers.", func() float64 { return float64(a.mesh.Stats().ReportsBad) })
	gauge("agent_start_time_seconds", "When the agent started, Unix seconds.", func() float64 { return float64(a.started.Unix()) })
	reg.MustRegister(collectors.NewGoCollector())
	return reg
}

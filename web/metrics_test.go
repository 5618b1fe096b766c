package web

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches /metrics and parses it.
func scrape(t *testing.T, h http.Handler) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	res, body := do(t, h, http.MethodGet, "/metrics", "", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: got %d, want 200:\n%s", res.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return body, fams
}

// value returns the sample of family name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		}
	}
	t.Fatalf("metric %s%v missing", name, want)
	return 0
}

// TestMetricsMatchStatus checks that /metrics shows exactly what
// /v1/status shows, for the same source.
func TestMetricsMatchStatus(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	var s Status
	getJSON(t, h, "/v1/status", &s)
	_, fams := scrape(t, h)

	eq := func(name string, labels map[string]string, want float64) {
		t.Helper()
		if got := value(t, fams, name, labels); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s%v: got %v, want %v", name, labels, got, want)
		}
	}
	eq("reclaimnet_status_up", nil, 1)
	eq("reclaimnet_status_generated_timestamp_seconds", nil, float64(s.GeneratedAt.Unix()))
	eq("reclaimnet_raft_role", map[string]string{"role": "leader"}, 1)
	eq("reclaimnet_raft_role", map[string]string{"role": "follower"}, 0)
	eq("reclaimnet_raft_has_leader", nil, 1)
	eq("reclaimnet_members", map[string]string{"building": "sci", "state": "leaving"}, 1)
	eq("reclaimnet_members", map[string]string{"building": "eng", "state": "alive"}, 2)
	for _, m := range s.Cluster.Members {
		l := map[string]string{"node": string(m.ID), "building": m.Building}
		eq("reclaimnet_node_hazard_per_second", l, m.Hazard)
		eq("reclaimnet_node_gpus", l, float64(m.GPUs))
		eq("reclaimnet_node_free_gpus", l, float64(m.FreeGPUs))
		eq("reclaimnet_node_load_ratio", l, m.Load)
		eq("reclaimnet_killswitch_drops_total", map[string]string{"node": string(m.ID)}, float64(m.KillSwitchDrops))
		for _, mode := range killSwitchModes {
			eq("reclaimnet_killswitch_mode", map[string]string{"node": string(m.ID), "mode": string(mode)}, b2f(mode == m.KillSwitch))
		}
	}
	for _, b := range s.Cluster.Bandwidth {
		l := map[string]string{"from_building": b.From, "to_building": b.To}
		eq("reclaimnet_bandwidth_available_bytes_per_second", l, b.Available)
		eq("reclaimnet_bandwidth_available_low_bytes_per_second", l, b.AvailableLow)
	}
	eq("reclaimnet_checkpoint_budget_bytes_per_second", nil, s.Control.CheckpointBudget)
	eq("reclaimnet_jobs", map[string]string{"state": "running"}, 1)
	eq("reclaimnet_jobs", map[string]string{"state": "migrating"}, 1)
	eq("reclaimnet_jobs", map[string]string{"state": "done"}, 0)
	eq("reclaimnet_jobs", map[string]string{"state": "pending"}, 2)
	eq("reclaimnet_jobs", map[string]string{"state": "failed"}, 1)
	eq("reclaimnet_jobs", map[string]string{"state": "cancelled"}, 1)
	for _, j := range s.Jobs {
		l := map[string]string{"job": string(j.ID)}
		eq("reclaimnet_job_restarts_total", l, float64(j.Restarts))
		if d := j.Decision; d != nil {
			eq("reclaimnet_job_checkpoint_interval_seconds", l, d.Interval.Seconds())
			eq("reclaimnet_job_checkpoint_bandwidth_bytes_per_second", l, d.Bandwidth)
			eq("reclaimnet_job_hazard_per_second", l, d.Hazard)
			eq("reclaimnet_job_loss_budget_infeasible", l, b2f(d.LossBudgetInfeasible))
		}
		if c := j.LastCheckpoint; c != nil {
			eq("reclaimnet_job_checkpoint_age_seconds", l, c.Age.Seconds())
		}
	}
	eq("reclaimnet_job_checkpoint_age_seconds", map[string]string{"job": "llama-ft"}, llamaAge.Seconds())
	for _, x := range s.Transfers {
		l := map[string]string{"transfer": x.Flow.ID, "job": string(x.Flow.Job), "class": x.Class}
		eq("reclaimnet_transfer_assigned_bytes_per_second", l, x.Flow.Rate)
		eq("reclaimnet_transfer_achieved_bytes_per_second", l, x.Achieved)
		eq("reclaimnet_transfer_done_bytes", l, float64(x.BytesDone))
		eq("reclaimnet_transfer_size_bytes", l, float64(x.BytesTotal))
		eq("reclaimnet_transfer_time_left_seconds", l, x.TimeLeft.Seconds())
		if x.UntilDeadline != nil {
			eq("reclaimnet_transfer_until_deadline_seconds", l, x.UntilDeadline.Seconds())
		}
	}
	eq("reclaimnet_reclaims_pending", nil, 1)
	eq("reclaimnet_reclaim_remaining_seconds", map[string]string{"node": "n3", "kind": "scheduled"}, (reclaimNotice - reclaimElapsed).Seconds())
	eq("reclaimnet_admissions_total", map[string]string{"result": "admitted"}, float64(s.Counters.AdmittedMigrations))
	eq("reclaimnet_admissions_total", map[string]string{"result": "rejected"}, float64(s.Counters.RejectedMigrations))
	eq("reclaimnet_handoffs_total", nil, float64(s.Counters.Handoffs))
	eq("reclaimnet_degraded_recoveries_total", nil, float64(s.Counters.DegradedRecoveries))

	// The infeasible flag is 1 for resnet.
	eq("reclaimnet_job_loss_budget_infeasible", map[string]string{"job": "resnet"}, 1)
	// Counters are typed as counters.
	for name, f := range fams {
		if strings.HasSuffix(name, "_total") != (f.GetType() == dto.MetricType_COUNTER) {
			t.Errorf("%s: got type %v; names ending in _total must be counters and only they", name, f.GetType())
		}
	}
}

// Every metric the collector describes appears in a full scenario, and
// every one is documented in web/README.md.
func TestEveryMetricEmittedAndDocumented(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	_, fams := scrape(t, h)
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatalf("read the metric documentation: %v", err)
	}
	var names []string
	for _, m := range allMetrics {
		names = append(names, descName(m.desc))
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s: described but not emitted for a full status", name)
		}
		if !bytes.Contains(doc, []byte("`"+name+"`")) {
			t.Errorf("%s: not documented in web/README.md", name)
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "reclaimnet_") && !contains(names, name) {
			t.Errorf("%s: emitted but not in allMetrics", name)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// descName extracts the fully-qualified name of a Desc.
func descName(d *prometheus.Desc) string {
	s := d.String() // Desc{fqName: "name", help: ...
	_, rest, _ := strings.Cut(s, `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}

func TestMetricsWhenSourceDown(t *testing.T) {
	src := newMemSource(scenarioA)
	src.fail(errors.New("not ready"))
	h := newTestHandler(t, Config{Source: src})
	_, fams := scrape(t, h)
	if got := value(t, fams, "reclaimnet_status_up", nil); got != 0 {
		t.Errorf("status_up: got %v, want 0", got)
	}
	if _, ok := fams["reclaimnet_jobs"]; ok {
		t.Errorf("got reclaimnet_jobs while the status is unavailable, want only status_up")
	}
}

// TestPromtoolCheckMetrics runs Prometheus's own linter over the
// exposition (Debian package prometheus).
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found (Debian package prometheus): %v", err)
		}
		t.Skipf("promtool not found (install Debian's prometheus package): %v", err)
	}
	for name, build := range map[string]func() Status{"scenario A": scenarioA, "scenario B": scenarioB, "empty": func() Status { return Status{} }} {
		h := newTestHandler(t, Config{Source: newMemSource(build)})
		body, _ := scrape(t, h)
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("%s: promtool check metrics: %v\n%s", name, err, out)
		}
	}
}

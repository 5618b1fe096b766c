package web

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/reclaimnet/reclaimnet/policy"
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
		eq("reclaimnet_node_eligible", l, b2f(m.Eligible))
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
	eq("reclaimnet_jobs_under_way", map[string]string{"activity": "checkpointing"}, 1)
	eq("reclaimnet_jobs_under_way", map[string]string{"activity": "handing off"}, 1)
	eq("reclaimnet_jobs_under_way", map[string]string{"activity": "restoring"}, 0)
	for _, j := range s.Jobs {
		l := map[string]string{"job_id": string(j.ID)}
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
	eq("reclaimnet_job_checkpoint_age_seconds", map[string]string{"job_id": "llama-ft"}, llamaAge.Seconds())
	for _, x := range s.Transfers {
		l := map[string]string{"job_id": string(x.Flow.Job), "class": x.Class} // one transfer per job and class here
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

	// The infeasible flag is 1 for resnet, whose interval floor (2000 s)
	// is above its ceiling (2·5 min): its budget is unmet; llama-ft's is met.
	eq("reclaimnet_job_loss_budget_infeasible", map[string]string{"job_id": "resnet"}, 1)
	eq("reclaimnet_job_loss_budget_unmet", map[string]string{"job_id": "resnet"}, 1)
	eq("reclaimnet_job_interval_floor_seconds", map[string]string{"job_id": "resnet"}, 2000)
	eq("reclaimnet_job_interval_ceiling_seconds", map[string]string{"job_id": "resnet"}, 600)
	eq("reclaimnet_job_loss_budget_unmet", map[string]string{"job_id": "llama-ft"}, 0)
	eq("reclaimnet_job_replicas", map[string]string{"job_id": "llama-ft"}, 2)
	eq("reclaimnet_job_holders", map[string]string{"job_id": "llama-ft"}, 1)
	eq("reclaimnet_job_holder_risk_ratio", map[string]string{"job_id": "llama-ft"}, 0.004)
	// Counters are typed as counters.
	for name, f := range fams {
		if strings.HasSuffix(name, "_total") != (f.GetType() == dto.MetricType_COUNTER) {
			t.Errorf("%s: got type %v; names ending in _total must be counters and only they", name, f.GetType())
		}
	}
}

// docRow is one row of the metric table in docs/metrics.md.
type docRow struct {
	typ, exporter string
	labels        []string
}

// metricDocs parses the metric table of docs/metrics.md.
func metricDocs(t *testing.T) map[string]docRow {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatalf("read the metric documentation: %v", err)
	}
	rows := map[string]docRow{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 7 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`reclaimnet_") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var labels []string
		for _, l := range strings.Split(cells[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		rows[name] = docRow{typ: strings.TrimSpace(cells[2]), exporter: strings.TrimSpace(cells[4]), labels: labels}
	}
	if len(rows) < 20 {
		t.Fatalf("docs/metrics.md: found %d metric rows, want the full table", len(rows))
	}
	return rows
}

// familyLabels returns the sorted label names of a family's samples
// (the first sample's; the conventions test checks they agree).
func familyLabels(f *dto.MetricFamily) []string {
	var out []string
	if len(f.Metric) > 0 {
		for _, l := range f.Metric[0].Label {
			if l.GetName() != "le" {
				out = append(out, l.GetName())
			}
		}
	}
	sort.Strings(out)
	return out
}

// Every metric the collector describes appears in a full scenario with
// the type and labels docs/metrics.md gives it, and it is exported by
// the agent the table says: a follower exports only the node's own.
func TestEveryMetricEmittedAndDocumented(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	_, fams := scrape(t, h)
	follower := func() Status {
		s := scenarioA()
		for i := range s.Cluster.Members {
			if s.Cluster.Members[i].ID == s.Node {
				s.Cluster.Members[i].RaftRole = RaftFollower
			}
		}
		return s
	}
	_, followerFams := scrape(t, newTestHandler(t, Config{Source: newMemSource(follower)}))
	if got := value(t, followerFams, "reclaimnet_raft_role", map[string]string{"role": "follower"}); got != 1 {
		t.Fatalf("follower scenario: raft_role{follower} = %v, want 1", got)
	}
	docs := metricDocs(t)
	var names []string
	for _, m := range allMetrics {
		names = append(names, descName(m.desc))
	}
	sort.Strings(names)
	for _, name := range names {
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s: described but not emitted for a full status", name)
			continue
		}
		row, ok := docs[name]
		if !ok {
			t.Errorf("%s: not listed in docs/metrics.md", name)
			continue
		}
		if got := strings.ToLower(f.GetType().String()); got != row.typ {
			t.Errorf("%s: type %s, docs/metrics.md says %s", name, got, row.typ)
		}
		if got := familyLabels(f); !slices.Equal(got, row.labels) {
			t.Errorf("%s: labels %v, docs/metrics.md says %v", name, got, row.labels)
		}
		_, onFollower := followerFams[name]
		if want := row.exporter == "every agent"; onFollower != want {
			t.Errorf("%s: exported by a follower: %v; docs/metrics.md says %q", name, onFollower, row.exporter)
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "reclaimnet_") && !contains(names, name) {
			t.Errorf("%s: emitted but not in allMetrics", name)
		}
	}
}

// unboundedLabels are label names whose values grow without bound (one
// per transfer, flow, error or address) or that Prometheus itself sets.
var unboundedLabels = []string{"job", "instance", "transfer", "flow", "flow_id", "id", "addr", "error", "reason", "path"}

// checkMetricName reports how a metric's name, type and labels break the
// Prometheus naming conventions (https://prometheus.io/docs/practices/naming/).
func checkMetricName(name, typ string, labels []string) []string {
	var errs []string
	if !regexp.MustCompile(`^reclaimnet_[a-z][a-z0-9]*(_[a-z0-9]+)*$`).MatchString(name) {
		errs = append(errs, "not reclaimnet_ and snake_case")
	}
	if (typ == "counter") != strings.HasSuffix(name, "_total") {
		errs = append(errs, "counters, and only they, end in _total")
	}
	switch {
	case typ == "histogram" && !strings.HasSuffix(name, "_seconds") && !strings.HasSuffix(name, "_bytes"):
		errs = append(errs, "a histogram names its base unit (_seconds, _bytes)")
	case strings.HasSuffix(name, "_info") && typ != "gauge":
		errs = append(errs, "an _info metric is a gauge")
	}
	for _, unit := range []string{"seconds", "bytes"} {
		if strings.Contains(name, "_"+unit) && !regexp.MustCompile(`_`+unit+`(_per_second)?(_total)?$`).MatchString(name) {
			errs = append(errs, "the unit "+unit+" comes last (before _per_second or _total)")
		}
	}
	for _, bad := range []string{"_milliseconds", "_ms", "_kb", "_mb", "_mib", "_percent", "_minutes", "_hours"} {
		if strings.Contains(name, bad) {
			errs = append(errs, "not in base units ("+bad+")")
		}
	}
	for _, l := range labels {
		switch {
		case !regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(l):
			errs = append(errs, "label "+l+" is not snake_case")
		case slices.Contains(unboundedLabels, l):
			errs = append(errs, "label "+l+" is reserved by Prometheus or unbounded")
		case l == "version" && name != "reclaimnet_build_info":
			errs = append(errs, "label version only on build_info")
		}
	}
	return errs
}

// TestMetricNamingConventions checks every metric docs/metrics.md lists
// (and so, by the tests above and the agent's, every metric exported)
// against the conventions, and the checker against known violations.
func TestMetricNamingConventions(t *testing.T) {
	for name, row := range metricDocs(t) {
		if row.exporter != "every agent" && row.exporter != "leader" {
			t.Errorf("%s: exported by %q, want \"every agent\" or \"leader\"", name, row.exporter)
		}
		for _, e := range checkMetricName(name, row.typ, row.labels) {
			t.Errorf("%s: %s", name, e)
		}
	}
	for _, bad := range []struct {
		name, typ string
		labels    []string
	}{
		{"reclaimnet_job_restarts_total", "counter", []string{"job"}},
		{"reclaimnet_transfer_done_bytes", "gauge", []string{"transfer", "class"}},
		{"reclaimnet_handoffs", "counter", nil},
		{"reclaimnet_jobs_total", "gauge", nil},
		{"reclaimnet_handoff_downtime", "histogram", nil},
		{"reclaimnet_checkpoint_write_ms", "gauge", nil},
		{"reclaimnet_transfer_bytes_done", "gauge", nil},
		{"reclaimnet_Jobs", "gauge", nil},
		{"reclaimnet_jobs", "gauge", []string{"jobState"}},
	} {
		if errs := checkMetricName(bad.name, bad.typ, bad.labels); len(errs) == 0 {
			t.Errorf("%s %s %v: the checker accepts a violation", bad.name, bad.typ, bad.labels)
		}
	}
}

// A finished job's series are gone; its count stays in reclaimnet_jobs.
func TestMetricsDropFinishedJobs(t *testing.T) {
	done := func() Status {
		s := scenarioA()
		s.Jobs[0].State = policy.JobDone.String() // llama-ft, with a decision and a checkpoint
		s.Transfers = s.Transfers[:1]             // and no pre-sync in flight any more
		return s
	}
	body, fams := scrape(t, newTestHandler(t, Config{Source: newMemSource(done)}))
	if strings.Contains(body, `job_id="llama-ft"`) {
		t.Errorf("a done job keeps series:\n%s", grepLines(body, `job_id="llama-ft"`))
	}
	if got := value(t, fams, "reclaimnet_jobs", map[string]string{"state": "done"}); got != 1 {
		t.Errorf("jobs{done}: got %v, want 1", got)
	}
	if got := value(t, fams, "reclaimnet_job_restarts_total", map[string]string{"job_id": "resnet"}); got != 3 {
		t.Errorf("job_restarts_total{resnet}: got %v, want 3 (running jobs keep their series)", got)
	}
}

// Transfers of one job and class make one series: rates and bytes add
// up, the time left is the slowest one's, the deadline the earliest.
func TestMetricsGroupTransfers(t *testing.T) {
	two := func() Status {
		s := scenarioA()
		x := s.Transfers[0] // resnet's migration
		x.Flow.ID, x.Flow.To = "f-resnet-12-b", "n4"
		x.Flow.Rate, x.Achieved, x.BytesDone, x.BytesTotal = 1_000_000, 900_000, 5_000, 70_000
		s.Transfers = append(s.Transfers, x)
		return s
	}
	src := newMemSource(two)
	h := newTestHandler(t, Config{Source: src})
	var st Status
	getJSON(t, h, "/v1/status", &st)
	body, fams := scrape(t, h)
	var a, b Transfer
	for _, x := range st.Transfers {
		switch x.Flow.ID {
		case "f-resnet-12":
			a = x
		case "f-resnet-12-b":
			b = x
		}
	}
	if a.TimeLeft == nil || b.TimeLeft == nil || a.UntilDeadline == nil {
		t.Fatalf("scenario: want both transfers with a time left and a deadline, got %+v and %+v", a, b)
	}
	l := map[string]string{"job_id": "resnet", "class": a.Class}
	for name, want := range map[string]float64{
		"reclaimnet_transfer_assigned_bytes_per_second": a.Flow.Rate + b.Flow.Rate,
		"reclaimnet_transfer_achieved_bytes_per_second": a.Achieved + b.Achieved,
		"reclaimnet_transfer_done_bytes":                float64(a.BytesDone + b.BytesDone),
		"reclaimnet_transfer_size_bytes":                float64(a.BytesTotal + b.BytesTotal),
		"reclaimnet_transfer_time_left_seconds":         max(a.TimeLeft.Seconds(), b.TimeLeft.Seconds()),
		"reclaimnet_transfer_until_deadline_seconds":    min(a.UntilDeadline.Seconds(), b.UntilDeadline.Seconds()),
	} {
		if got := value(t, fams, name, l); math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Errorf("%s%v: got %v, want %v", name, l, got, want)
		}
		want := 2 // resnet's migration and llama-ft's pre-sync, which has no deadline
		if name == "reclaimnet_transfer_until_deadline_seconds" {
			want = 1
		}
		if n := strings.Count(body, name+"{"); n != want {
			t.Errorf("%s: %d series, want %d:\n%s", name, n, want, grepLines(body, name))
		}
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
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

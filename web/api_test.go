package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// quietLogger drops log output (tests provoke errors on purpose).
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestHandler(t *testing.T, cfg Config) *Handler {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h
}

// do sends one request through the handler.
func do(t *testing.T, h http.Handler, method, path string, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Host = "127.0.0.1:7949"
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// getJSON fetches path, checks 200 and JSON, and decodes into v.
func getJSON(t *testing.T, h http.Handler, path string, v any) {
	t.Helper()
	res, body := do(t, h, http.MethodGet, path, "", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d, want 200; body %s", path, res.StatusCode, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("GET %s: Content-Type %q, want application/json", path, ct)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("GET %s: decode: %v\n%s", path, err, body)
	}
}

func TestStatusEndpoint(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	var s Status
	getJSON(t, h, "/v1/status", &s)
	want := scenarioA()
	if !s.GeneratedAt.Equal(want.GeneratedAt) || s.Node != want.Node || s.Cluster.Leader != "n1" {
		t.Fatalf("got generated_at %v node %q leader %q, want %v n1 n1", s.GeneratedAt, s.Node, s.Cluster.Leader, want.GeneratedAt)
	}
	if len(s.Cluster.Members) != 4 || len(s.Jobs) != 6 || len(s.Transfers) != 2 || len(s.Decisions) != 2 {
		t.Fatalf("got %d members %d jobs %d transfers %d decisions, want 4 6 2 2",
			len(s.Cluster.Members), len(s.Jobs), len(s.Transfers), len(s.Decisions))
	}
	if got, want := s.Cluster.Hazard.Rates, want.Cluster.Hazard.Rates; len(got) != 48 || got[24] != want[24] {
		t.Errorf("cluster hazard profile: got %d buckets (bucket 24 = %v), want 48 (%v)", len(got), got[24], want[24])
	}
	if s.Counters != want.Counters || s.Control.CheckpointBudget != want.Control.CheckpointBudget {
		t.Errorf("got counters %+v budget %v, want %+v %v", s.Counters, s.Control.CheckpointBudget, want.Counters, want.Control.CheckpointBudget)
	}
	if s.Cluster.Protocols != want.Cluster.Protocols {
		t.Errorf("protocols: got %+v, want %+v", s.Cluster.Protocols, want.Cluster.Protocols)
	}
	var raw struct {
		Cluster struct {
			Protocols map[string]any `json:"protocols"`
		} `json:"cluster"`
	}
	_, body := do(t, h, http.MethodGet, "/v1/status", "", nil)
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	if p := raw.Cluster.Protocols; p["p2"] != false || p["p1"] != true || p["decided_by"] != "n1" || p["agree"] != false || p["fixed_interval_ns"] != float64(10*time.Minute) {
		t.Errorf("/v1/status cluster.protocols: got %v, want p1 on, p2 off, decided by n1, not agreeing, 10m fixed interval", p)
	}
}

func TestMembersEndpoint(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	var m MembersResponse
	getJSON(t, h, "/v1/members", &m)
	want := scenarioA()
	if m.Node != "n1" || m.Leader != "n1" || m.Name != "campus" {
		t.Fatalf("got node %q leader %q name %q, want n1 n1 campus", m.Node, m.Leader, m.Name)
	}
	if len(m.Members) != len(want.Cluster.Members) {
		t.Fatalf("got %d members, want %d", len(m.Members), len(want.Cluster.Members))
	}
	for i, got := range m.Members {
		w := want.Cluster.Members[i]
		if got.ID != w.ID || got.Building != w.Building || got.State != w.State || got.RaftRole != w.RaftRole ||
			got.GPU != w.GPU || got.GPUs != w.GPUs || got.Hazard != w.Hazard || got.KillSwitch != w.KillSwitch {
			t.Errorf("member %d: got %+v, want %+v", i, got, w)
		}
	}
	if len(m.Bandwidth) != 4 || m.Bandwidth[1] != want.Cluster.Bandwidth[1] {
		t.Errorf("bandwidth: got %+v, want %+v", m.Bandwidth, want.Cluster.Bandwidth)
	}
}

func TestJobsEndpoint(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	var r JobsResponse
	getJSON(t, h, "/v1/jobs", &r)
	if len(r.Jobs) != 6 {
		t.Fatalf("got %d jobs, want 6", len(r.Jobs))
	}
	llama := r.Jobs[0]
	if llama.ID != "llama-ft" || llama.State != "running" || llama.Node != "n1" {
		t.Fatalf("got job %q %q on %q, want llama-ft running on n1", llama.ID, llama.State, llama.Node)
	}
	if llama.Decision == nil || llama.Decision.Interval != 9*time.Minute+52*time.Second || llama.Decision.LossBudgetInfeasible {
		t.Errorf("llama decision: got %+v, want interval 9m52s, feasible", llama.Decision)
	}
	if c := llama.LastCheckpoint; c == nil || c.Age != llamaAge || len(c.Holders) != 2 {
		t.Errorf("llama checkpoint: got %+v, want age %v and 2 holders", c, llamaAge)
	}
	if d := r.Jobs[1].Decision; d == nil || !d.LossBudgetInfeasible {
		t.Errorf("resnet decision: got %+v, want the loss-budget flag set", d)
	}
	if r.Jobs[2].Decision != nil || r.Jobs[2].LastCheckpoint != nil {
		t.Errorf("pending bert: got decision %+v checkpoint %+v, want none", r.Jobs[2].Decision, r.Jobs[2].LastCheckpoint)
	}

	var one Job
	getJSON(t, h, "/v1/jobs/resnet", &one)
	if one.ID != "resnet" || one.Restarts != 3 {
		t.Errorf("GET /v1/jobs/resnet: got %q restarts %d, want resnet 3", one.ID, one.Restarts)
	}
	res, body := do(t, h, http.MethodGet, "/v1/jobs/nope", "", nil)
	var e ErrorResponse
	if res.StatusCode != http.StatusNotFound || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "nope") {
		t.Errorf("GET /v1/jobs/nope: got %d %s, want 404 with an error naming the job", res.StatusCode, body)
	}
}

func TestTransfersEndpoint(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	var r TransfersResponse
	getJSON(t, h, "/v1/transfers", &r)
	if len(r.Transfers) != 2 {
		t.Fatalf("got %d transfers, want 2", len(r.Transfers))
	}
	mig := r.Transfers[0]
	if mig.Class != "migration" || mig.Flow.Rate != xferAssigned || mig.Achieved != xferAchieved {
		t.Errorf("got class %q assigned %v achieved %v, want migration %v %v", mig.Class, mig.Flow.Rate, mig.Achieved, xferAssigned, xferAchieved)
	}
	// Time left at the achieved rate, and the deadline from the reclaim.
	leftBytes, rate := float64(ckptResnet-xferDone), xferAchieved
	wantLeft := time.Duration(leftBytes / rate * float64(time.Second))
	if mig.TimeLeft == nil || absDur(*mig.TimeLeft-wantLeft) > time.Millisecond {
		t.Errorf("time left: got %v, want %v", mig.TimeLeft, wantLeft)
	}
	if want := reclaimNotice - reclaimElapsed; mig.UntilDeadline == nil || *mig.UntilDeadline != want {
		t.Errorf("until deadline: got %v, want %v", mig.UntilDeadline, want)
	}
	// 1.0 GB at 28.5 MB/s takes 35 s, the deadline is 60 s away.
	if mig.Late {
		t.Errorf("got late, want on time (%v left, %v to the deadline)", wantLeft, reclaimNotice-reclaimElapsed)
	}
	pre := r.Transfers[1]
	if pre.Class != "presync" || pre.UntilDeadline != nil || pre.Late {
		t.Errorf("presync: got class %q until deadline %v late %v, want presync, none, false", pre.Class, pre.UntilDeadline, pre.Late)
	}
}

func TestReclaimsEndpoint(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	var r ReclaimsResponse
	getJSON(t, h, "/v1/reclaims", &r)
	if len(r.Pending) != 1 || r.Pending[0].Reclaim.Node != "n3" {
		t.Fatalf("pending: got %+v, want one for n3", r.Pending)
	}
	if p := r.Pending[0]; p.Remaining != reclaimNotice-reclaimElapsed || p.Emergency || len(p.Jobs) != 1 {
		t.Errorf("pending n3: got remaining %v emergency %v jobs %v, want %v false [resnet]", p.Remaining, p.Emergency, p.Jobs, reclaimNotice-reclaimElapsed)
	}
	if len(r.History) != 1 || !r.History[0].Emergency || len(r.History[0].Jobs) != 1 || !r.History[0].Jobs[0].Degraded {
		t.Errorf("history: got %+v, want one emergency with a degraded job", r.History)
	} else if h := r.History[0]; !h.Detected || h.OwnerReport || h.Jobs[0].Replica != "n4" || h.Jobs[0].Version != 3 || h.Jobs[0].To != "n2" || h.Jobs[0].WorkLost != 4*time.Minute {
		t.Errorf("history entry %+v: want found by detection, no owner's report yet, moved to n2 from n4's v3 with 4m lost", h)
	}
	if len(r.KillSwitches) != 4 || r.KillSwitches[2] != (KillSwitchState{Node: "n3", Mode: KillSwitchSoft, Drops: 17}) {
		t.Errorf("kill-switches: got %+v, want 4 with n3 soft and 17 drops", r.KillSwitches)
	}
}

func TestDecisionsEndpoint(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	var r DecisionsResponse
	getJSON(t, h, "/v1/decisions", &r)
	if len(r.Decisions) != 2 {
		t.Fatalf("got %d decisions, want 2", len(r.Decisions))
	}
	d := r.Decisions[0]
	if d.Kind != DecisionHandoff || d.Handoff == nil || d.Placement != nil {
		t.Fatalf("first decision: got kind %q handoff %v placement %v, want a hand-off only", d.Kind, d.Handoff, d.Placement)
	}
	want := scenarioA().Decisions[0].Handoff.Candidates
	if len(d.Handoff.Candidates) != len(want) {
		t.Fatalf("got %d candidates, want %d", len(d.Handoff.Candidates), len(want))
	}
	for i, c := range d.Handoff.Candidates {
		if c != want[i] {
			t.Errorf("candidate %d: got %+v, want %+v", i, c, want[i])
		}
	}
	if p := r.Decisions[1].Placement; p == nil || p.To != "n2" || p.Candidates[1].Rejected != string(policy.RejectGPUs) {
		t.Errorf("placement: got %+v, want bert to n2 with n1 rejected for GPUs", p)
	}
	if r.Control.CheckpointBudget != 16_500_000 {
		t.Errorf("checkpoint budget: got %v, want 16500000", r.Control.CheckpointBudget)
	}
}

// An empty cluster encodes lists as [], never null, so clients can range
// over them without checks.
func TestEmptyListsAreArrays(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(func() Status { return Status{Node: "lonely"} })})
	for _, path := range []string{"/v1/status", "/v1/members", "/v1/jobs", "/v1/transfers", "/v1/reclaims", "/v1/decisions"} {
		res, body := do(t, h, http.MethodGet, path, "", nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: got %d, want 200", path, res.StatusCode)
		}
		if strings.Contains(body, "null") {
			t.Errorf("GET %s: got a null in %s, want empty arrays", path, body)
		}
		var generic map[string]any
		if err := json.Unmarshal([]byte(body), &generic); err != nil || generic["generated_at"] == nil {
			t.Errorf("GET %s: got %v / generated_at %v, want a JSON object with generated_at", path, err, generic["generated_at"])
		}
	}
}

// The API must survive the infinities policy values may carry.
func TestNonFiniteNumbersStillEncode(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(func() Status {
		s := scenarioA()
		c := s.Decisions[0].Handoff.Candidates
		c[0].Score, c[1].Survival, c[1].Bottleneck = math.Inf(1), math.NaN(), math.Inf(-1)
		return s
	})})
	var r DecisionsResponse
	getJSON(t, h, "/v1/decisions", &r)
	c := r.Decisions[0].Handoff.Candidates
	if c[0].Score != math.MaxFloat64 || c[1].Survival != 0 || c[1].Bottleneck != -math.MaxFloat64 {
		t.Errorf("got score %v survival %v bottleneck %v, want MaxFloat64, 0, -MaxFloat64", c[0].Score, c[1].Survival, c[1].Bottleneck)
	}
	// The page still shows the infinity as such.
	res, body := do(t, h, http.MethodGet, "/", "", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "<td class=\"num\">∞</td>") {
		t.Errorf("page: got %d, want 200 showing the infinite score as ∞", res.StatusCode)
	}
}

func TestSourceErrorIs503Everywhere(t *testing.T) {
	src := newMemSource(scenarioA)
	src.fail(errors.New("raft not ready"))
	h := newTestHandler(t, Config{Source: src})
	for _, path := range []string{"/v1/status", "/v1/members", "/v1/jobs", "/v1/jobs/x", "/v1/transfers", "/v1/reclaims", "/v1/decisions", "/", "/ui/live"} {
		res, body := do(t, h, http.MethodGet, path, "", nil)
		if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "raft not ready") {
			t.Errorf("GET %s: got %d %q, want 503 naming the cause", path, res.StatusCode, body)
		}
	}
}

func TestUnknownAndWrongMethod(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	cases := []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/v1/nothing", http.StatusNotFound},
		{http.MethodPost, "/v1/status", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/v1/jobs", http.StatusMethodNotAllowed},
		{http.MethodGet, "/ui/live.tmpl", http.StatusNotFound},
		{http.MethodGet, "/ui/page.tmpl", http.StatusNotFound},
		{http.MethodGet, "/ui/style.css", http.StatusOK},
		{http.MethodGet, "/ui/app.js", http.StatusOK},
		{http.MethodGet, "/nothing", http.StatusNotFound},
	}
	for _, c := range cases {
		res, _ := do(t, h, c.method, c.path, "", nil)
		if res.StatusCode != c.want {
			t.Errorf("%s %s: got %d, want %d", c.method, c.path, res.StatusCode, c.want)
		}
	}
}

// The source is asked once per request, with a deadline.
func TestSourceGetsDeadline(t *testing.T) {
	var deadline time.Time
	var ok bool
	h := newTestHandler(t, Config{Source: sourceFunc(func(ctx context.Context) (Status, error) {
		deadline, ok = ctx.Deadline()
		return scenarioA(), nil
	}), SourceTimeout: 3 * time.Second})
	start := time.Now()
	do(t, h, http.MethodGet, "/v1/status", "", nil)
	if !ok || deadline.Sub(start) > 3*time.Second+time.Second || deadline.Before(start) {
		t.Errorf("got deadline %v (set %v) for a request at %v, want about 3s later", deadline, ok, start)
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// HEAD answers carry the length of the body a GET would get.
func TestHeadKeepsLength(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	for _, path := range []string{"/ui/app.js", "/ui/style.css"} {
		_, body := do(t, h, http.MethodGet, path, "", nil)
		res, _ := do(t, h, http.MethodHead, path, "", nil)
		if got, want := res.Header.Get("Content-Length"), strconv.Itoa(len(body)); got != want || len(body) == 0 {
			t.Errorf("HEAD %s: got Content-Length %q, want %q", path, got, want)
		}
	}
}

func TestJobsStateFilter(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA)})
	var r JobsResponse
	getJSON(t, h, "/v1/jobs?state=pending,failed", &r)
	var ids []policy.JobID
	for _, j := range r.Jobs {
		ids = append(ids, j.ID)
	}
	if !slices.Equal(ids, []policy.JobID{"bert", "huge", "vit"}) {
		t.Fatalf("state=pending,failed: got %v, want [bert huge vit]", ids)
	}
	getJSON(t, h, "/v1/jobs?state=running", &r)
	if len(r.Jobs) != 1 || r.Jobs[0].ID != "llama-ft" {
		t.Fatalf("state=running: got %+v", r.Jobs)
	}
	if res, body := do(t, h, http.MethodGet, "/v1/jobs?state=runing", "", nil); res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "cancelled") {
		t.Fatalf("unknown state: %d %s", res.StatusCode, body)
	}
}

package web

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// rowOf returns the HTML of the table row with the given id.
func rowOf(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no element with id %q in the page", id)
	}
	j := strings.Index(page[i:], "</tr>")
	if j < 0 {
		t.Fatalf("row %q not closed", id)
	}
	return page[i : i+j]
}

// TestPageWithoutJavaScript checks the server-rendered page: everything
// the issue lists is in the HTML itself.
func TestPageWithoutJavaScript(t *testing.T) {
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA), Refresh: 3 * time.Second})
	res, page := do(t, h, http.MethodGet, "/", "", nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: got %d %q, want 200 text/html", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP: got %q, want same-origin scripts and no unsafe-inline", csp)
	}
	// The page must work under that CSP: no inline script, no inline style.
	if regexp.MustCompile(`<script>|<script [^>]*>[^<]`).MatchString(page) || strings.Contains(page, " style=") || strings.Contains(page, "<style") {
		t.Errorf("page has inline script or style, which the CSP blocks")
	}
	for _, want := range []string{
		`<noscript><meta http-equiv="refresh" content="3"></noscript>`,
		`data-refresh-ms="3000"`,
		`<script src="ui/app.js" defer></script>`,
		`<b id="leader">n1</b>`,
		`Building eng <span class="muted">(2)</span>`, `Building sci <span class="muted">(2)</span>`,
		`<svg class="hz" width="560"`, `<svg class="hz spark"`,
		`<table class="matrix">`,
		`last control period 12:09:59 UTC`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	checks := []struct{ row, want string }{
		{"member-n1", "leader"},
		{"member-n1", "this node"},
		{"member-n1", "2 / 4 × A100-80GB <span class=\"muted\">(80 GiB, cc 8)</span>"},
		{"member-n3", `<span class="badge ks-soft">soft</span>`},
		{"member-n3", "17 dropped"},
		{"member-n3", `<span class="badge warn">no</span> <span class="small">kill-switch soft</span>`},
		{"member-n1", `<span class="badge good">yes</span>`},
		{"member-n4", "suspect"},
		{"member-n4", "nonvoter"},
		{"member-n4", `<span class="badge storage"`},
		{"job-llama-ft", `<span class="badge js-running">running</span> <span class="badge under-way">checkpointing</span>`},
		{"job-llama-ft", "<b>9m52s</b>"},
		{"job-llama-ft", "hazard 0.99/h"},
		{"job-llama-ft", "bandwidth 100 Mbit/s"},
		{"job-llama-ft", "<b>3m12s</b> ago"},
		{"job-llama-ft", "on n2, n3"},
		{"job-llama-ft", "has 75%"},
		{"job-resnet", "loss budget cannot be met: floor C/(β·b) 33m20s above 2·Lmax 10m00s"},
		{"job-resnet", "set by network floor"},
		{"job-llama-ft", "set by optimum"},
		{"job-llama-ft", "holders n2 of k=2 · all leave with the host: 0.4%"},
		{"job-bert", "no decision yet"},
		{"job-llama-ft", "11.9 MiB"},
		{"job-vit", "results v9 on n2, n4 until 2026-12-09 06:30Z"},
		{"job-huge", "waits: needs 16 GPUs; the largest node has 4"},
		{"job-vit", `<span class="badge js-failed">failed</span>`},
		{"job-vit", "signal killed (out of memory)</span> on n2"},
		{"job-vit", "failure 2, 1 allowed"},
		{"job-vit", "allocating 40 GiB"},
		{"job-t5", `<span class="badge js-cancelled">cancelled</span>`},
		{"job-t5", "cancelled by alice on n1"},
		{"transfer-f-resnet-12", "240 Mbit/s / <b>228 Mbit/s</b>"},
		{"transfer-f-resnet-12", "35s / 1m00s"},
		{"transfer-f-resnet-12", "572.2 MiB of 1.49 GiB (38%)"},
		{"transfer-f-llama-presync", "no deadline"},
		{"reclaim-n3", "<b>1m00s</b>"},
		{"reclaim-n3", "resnet"},
	}
	for _, c := range checks {
		if row := rowOf(t, page, c.row); !strings.Contains(row, c.want) {
			t.Errorf("row %s lacks %q:\n%s", c.row, c.want, row)
		}
	}
	if row := rowOf(t, page, "job-llama-ft"); strings.Contains(row, "loss budget infeasible") || strings.Contains(row, "cannot be met") {
		t.Errorf("llama-ft shows the loss-budget flag, want it only on resnet")
	}
	// Which nodes tend to leave together, most likely first.
	ci := strings.Index(page, `id="codeparture"`)
	if ci < 0 {
		t.Fatalf("no co-departure section")
	}
	co := page[ci : ci+strings.Index(page[ci:], "</section>")]
	for _, want := range []string{"within 1m00s of the other", "<td>n3 · n4</td><td>building</td><td class=\"num\">62%</td>", "<td>n1 · n3</td><td>none</td><td class=\"num\">0.2%</td>"} {
		if !strings.Contains(co, want) {
			t.Errorf("co-departure section lacks %q:\n%s", want, co)
		}
	}
	if a, b := strings.Index(co, "n3 · n4"), strings.Index(co, "n1 · n2"); a < 0 || b < a {
		t.Errorf("co-departure pairs not highest first:\n%s", co)
	}
	// The hand-off's candidates: n2 (64.5 s) ranks before n1 (71.2 s) and
	// is chosen; the rejected ones follow with P2's reasons.
	i := strings.Index(page, `id="decision-handoff-resnet"`)
	if i < 0 {
		t.Fatalf("no hand-off decision for resnet")
	}
	dec := page[i : i+strings.Index(page[i:], "</table>")]
	order := []string{"<td>n2</td>", "<td>n1</td>", "<td>n3</td>", "<td>n4</td>"}
	last := -1
	for _, o := range order {
		k := strings.Index(dec, o)
		if k < last {
			t.Errorf("candidates out of order: %q at %d, before the previous at %d", o, k, last)
		}
		last = k
	}
	for _, want := range []string{"<b>chosen</b>", "higher score", "rejected: " + string(policy.RejectSource), "rejected: " + string(policy.RejectLoad), "64.5 s", "zero-loss final checkpoint"} {
		if !strings.Contains(dec, want) {
			t.Errorf("hand-off decision lacks %q", want)
		}
	}
	if !strings.Contains(page, "Placement of bert on <b>n2</b> <span class=\"muted\">(starts without a replica)</span>") {
		t.Errorf("placement of bert: heading missing or wrong")
	}
	// History: the owner's report.
	if !strings.Contains(page, "emergency: recovered from replica v3") || !strings.Contains(page, "down 1m01s") {
		t.Errorf("reclaim history lacks the owner's report")
	}
	// ... and the cluster's record: replica, version, detection.
	for _, want := range []string{"(from the replica on n4)", "v3</span>", "found by failure detection", "the owner's report has not reached the cluster yet", "lost 4m00s"} {
		if !strings.Contains(page, want) {
			t.Errorf("reclaim history lacks %q", want)
		}
	}
	// The protocol switches in force, and this node's differing own.
	if !strings.Contains(page, "<b>p1,p3 (P2 off: random destination)</b>") || !strings.Contains(page, "(leader n1)") || !strings.Contains(page, "this node: p1,p2,p3") {
		t.Errorf("page lacks the protocol switches in force and the disagreement")
	}

	res, live := do(t, h, http.MethodGet, "/ui/live", "", nil)
	if res.StatusCode != http.StatusOK || strings.Contains(live, "<html") || !strings.Contains(live, `id="job-llama-ft"`) {
		t.Errorf("GET /ui/live: got %d, want the live fragment alone with the jobs", res.StatusCode)
	}
}

func TestPageShowsSourceError(t *testing.T) {
	src := newMemSource(scenarioA)
	src.fail(fmt.Errorf("gossip not joined"))
	h := newTestHandler(t, Config{Source: src})
	res, page := do(t, h, http.MethodGet, "/", "", nil)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(page, `id="error"`) || !strings.Contains(page, "gossip not joined") {
		t.Errorf("got %d, want 503 with an error banner naming the cause", res.StatusCode)
	}
}

var rectRe = regexp.MustCompile(`<rect class="(bar(?: cur)?)" x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)" data-rate="([^"]+)"`)

func TestHazardChart(t *testing.T) {
	p := HazardProfile{Rates: []float64{1e-4, 2e-4, 4e-4, 0}}
	at := time.Date(2026, 1, 2, 13, 0, 0, 0, time.UTC) // bucket 2 (12:00–18:00)
	svg := string(hazardChart(p, at, chartSize))
	bars := rectRe.FindAllStringSubmatch(svg, -1)
	if len(bars) != 4 {
		t.Fatalf("got %d bars, want 4:\n%s", len(bars), svg)
	}
	ph := chartSize.H - chartSize.Top - chartSize.Bottom
	pw := chartSize.W - chartSize.Left - chartSize.Right
	for i, b := range bars {
		h, _ := strconv.ParseFloat(b[5], 64)
		y, _ := strconv.ParseFloat(b[3], 64)
		x, _ := strconv.ParseFloat(b[2], 64)
		want := p.Rates[i] / 4e-4 * ph
		if math.Abs(h-want) > 0.01 || math.Abs(y+h-(chartSize.Top+ph)) > 0.01 {
			t.Errorf("bar %d: got height %.2f at y %.2f, want %.2f standing on the axis", i, h, y, want)
		}
		if wantX := chartSize.Left + float64(i)*pw/4; math.Abs(x-wantX) > 0.01 {
			t.Errorf("bar %d: got x %.2f, want %.2f", i, x, wantX)
		}
		if cur := b[1] == "bar cur"; cur != (i == 2) {
			t.Errorf("bar %d: got highlighted=%v, want %v", i, cur, i == 2)
		}
	}
	nowX := chartSize.Left + 13.0/24*pw
	if !strings.Contains(svg, fmt.Sprintf(`<line class="now" x1="%.2f"`, nowX)) {
		t.Errorf("no now-line at x=%.2f:\n%s", nowX, svg)
	}
	for _, want := range []string{"1.44/h", "now 1.44/h", "12:00–18:00 UTC: 1.44/h", ">18:00<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// The sparkline: one step path over the four buckets (heights
	// 6.0, 12.0, 24.0, 0.0 of a 24-unit plot standing on y=26) and the
	// current bucket as the only bar.
	spark := string(hazardChart(p, at, sparkSize))
	if want := `d="M1.0 26.0V20.0H30.5V14.0H60.0V2.0H89.5V26.0H119.0V26.0Z"`; !strings.Contains(spark, want) {
		t.Errorf("sparkline: want path %s in\n%s", want, spark)
	}
	if bars := rectRe.FindAllStringSubmatch(spark, -1); strings.Contains(spark, "<text") || len(bars) != 1 || bars[0][1] != "bar cur" {
		t.Errorf("sparkline: want one highlighted bar and no text:\n%s", spark)
	}
	if empty := string(hazardChart(HazardProfile{}, at, chartSize)); !strings.Contains(empty, "no estimate yet") || strings.Contains(empty, "<rect") {
		t.Errorf("empty profile: got %s, want a 'no estimate yet' note", empty)
	}
	// An infinite bucket does not flatten the others.
	inf := string(hazardChart(HazardProfile{Rates: []float64{math.Inf(1), 2e-4}}, at, chartSize))
	if bars := rectRe.FindAllStringSubmatch(inf, -1); len(bars) != 2 || bars[1][5] != fmt.Sprintf("%.2f", ph) {
		t.Errorf("profile with +Inf: got %v, want the finite bar at full height", bars)
	}
}

func TestBandwidthMatrix(t *testing.T) {
	m := newBandwidthMatrix(scenarioA().Cluster.Bandwidth)
	if strings.Join(m.Buildings, ",") != "eng,sci" || len(m.Rows) != 2 {
		t.Fatalf("got buildings %v and %d rows, want eng,sci and 2", m.Buildings, len(m.Rows))
	}
	want := [2][2]string{
		{"bw8", "bw2"},        // 102.5 and 30 of 125 MB/s capacity
		{"bw2", "unmeasured"}, // 28 of 125; the default nobody measured: no share colour
	}
	for i, row := range m.Rows {
		for j, c := range row.Cells {
			if !c.Has || c.Class != want[i][j] || c.E.From != m.Buildings[i] || c.E.To != m.Buildings[j] {
				t.Errorf("cell %s→%s: got %+v, want class %s", m.Buildings[i], m.Buildings[j], c, want[i][j])
			}
		}
	}
	// Without a capacity a measured figure is a share of the best measured
	// pair's; a declared or assumed figure is never that pair.
	ref := newBandwidthMatrix([]BuildingBandwidth{{From: "a", To: "a", Available: 50, Basis: BandwidthMeasured},
		{From: "a", To: "b", Available: 100, Basis: BandwidthMeasured}, {From: "b", To: "b", Available: 1000, Basis: BandwidthDeclared}})
	if got := ref.Rows[0].Cells[0].Class; got != "bw5" {
		t.Errorf("50 of the best measured 100: got class %s, want bw5", got)
	}
	if got := ref.Rows[1].Cells[1].Class; got != "unmeasured" {
		t.Errorf("declared: got class %s, want unmeasured", got)
	}
	gap := newBandwidthMatrix([]BuildingBandwidth{{From: "a", To: "b", Available: 5}})
	if len(gap.Rows) != 2 || gap.Rows[1].Cells[0].Has || !gap.Rows[0].Cells[1].Has {
		t.Errorf("sparse matrix: got %+v, want only a→b filled", gap.Rows)
	}
}

func TestRankCandidates(t *testing.T) {
	in := []policy.Candidate{
		{Node: "a", Score: 30},
		{Node: "x", Rejected: policy.RejectVRAM},
		{Node: "b", Score: 10},
		{Node: "c", Score: 20},
		{Node: "y", Rejected: policy.RejectDeadline},
	}
	got := rankCandidates(webCandidates(in), "b")
	var names []string
	for _, r := range got {
		names = append(names, fmt.Sprintf("%s%d%v", r.C.Node, r.Rank, r.Chosen))
	}
	if s := strings.Join(names, " "); s != "b1true c2false a3false x0false y0false" {
		t.Errorf("got %s, want b1true c2false a3false x0false y0false", s)
	}
}

func TestPrepareDerivedFields(t *testing.T) {
	now := scenarioNow
	s := Status{
		Transfers: []Transfer{
			{Flow: WebFlow(policy.FlowDecision{Deadline: now.Add(10 * time.Second), Class: policy.ClassEmergency}), Achieved: 1e6, BytesDone: 0, BytesTotal: 20e6},
			{Flow: Flow{Deadline: now.Add(10 * time.Second)}, Achieved: 0, BytesTotal: 1},
		},
		Reclaims: Reclaims{
			Pending: []PendingReclaim{{Reclaim: Reclaim{Node: "x", Announced: now.Add(-time.Minute), Deadline: now.Add(-time.Second)}}},
			History: []ReclaimRecord{{Reclaim: Reclaim{Announced: now, Deadline: now}}},
		},
	}
	s.prepare(now)
	if !s.GeneratedAt.Equal(now) {
		t.Errorf("generated_at: got %v, want %v", s.GeneratedAt, now)
	}
	late := s.Transfers[0]
	if late.TimeLeft == nil || *late.TimeLeft != 20*time.Second || !late.Late || late.Class != "emergency" {
		t.Errorf("20 MB at 1 MB/s with 10 s left: got time left %v late %v class %q, want 20s true emergency", late.TimeLeft, late.Late, late.Class)
	}
	if s.Transfers[1].TimeLeft != nil || s.Transfers[1].Late {
		t.Errorf("unmeasured transfer: got time left %v late %v, want nil false", s.Transfers[1].TimeLeft, s.Transfers[1].Late)
	}
	if p := s.Reclaims.Pending[0]; p.Remaining != 0 || p.Emergency {
		t.Errorf("past-deadline scheduled reclaim: got remaining %v emergency %v, want 0 false", p.Remaining, p.Emergency)
	}
	if !s.Reclaims.History[0].Emergency {
		t.Errorf("history with deadline = announced: got emergency false, want true")
	}
}

func TestFormats(t *testing.T) {
	cases := []struct{ got, want string }{
		{fmtBytes(3_200_000_000), "2.98 GiB"},
		{fmtBytes(600_000_000), "572.2 MiB"},
		{fmtBytes(3 << 40), "3.00 TiB"},
		{fmtBytes(1536), "1.5 KiB"},
		{fmtBuilding(""), "no building"},
		{fmtBuilding("sci"), "sci"},
		{fmtBytes(512), "512 B"},
		{fmtRate(30_000_000), "240 Mbit/s"},
		{fmtRate(125_000_000), "1.00 Gbit/s"},
		{fmtRate(math.Inf(1)), "∞"},
		{fmtDur(592*time.Second + 700*time.Millisecond), "9m52s"},
		{fmtDur(3*time.Hour + 4*time.Minute), "3h04m"},
		{fmtDur(1500 * time.Millisecond), "1.5s"},
		{fmtDur(-30 * time.Second), "−30s"},
		{fmtDur(26 * time.Hour), "1d02h"},
		{fmtHazard(0.99 / 3600), "0.99/h"},
		{fmtPct(1, 4), "25%"},
		{fmtPct(1, 0), "—"},
		{fmtSeconds(math.Inf(1)), "∞"},
		{fmtClock(scenarioNow), "12:10:00 UTC"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// The summary says how the serving node runs guest jobs, and marks the
// two ways a node is not confining them.
func TestPageShowsSandbox(t *testing.T) {
	for _, tc := range []struct {
		sb   Sandbox
		want string
	}{
		{Sandbox{Mode: "on", Available: true, Summary: "sandbox on: cgroup v2 (unified), guest uids 1-2"},
			`<span class="badge good">on</span> <span class="muted">sandbox on: cgroup v2 (unified), guest uids 1-2</span>`},
		{Sandbox{Mode: "off", Available: true, Summary: "sandbox off: jobs run unconfined"},
			`<span class="badge bad">off</span> sandbox off: jobs run unconfined`},
		{Sandbox{Mode: "on", Summary: "jobs cannot be confined, none starts: no cgroups"},
			`<span class="badge bad">unavailable</span> jobs cannot be confined, none starts: no cgroups`},
		{Sandbox{}, `<span class="k">sandbox</span> <span class="muted">unknown</span>`},
	} {
		h := newTestHandler(t, Config{Source: newMemSource(func() Status { s := scenarioA(); s.Sandbox = tc.sb; return s })})
		_, page := do(t, h, http.MethodGet, "/", "", nil)
		if !strings.Contains(page, tc.want) {
			t.Errorf("sandbox %+v: page lacks %q", tc.sb, tc.want)
		}
	}
}

// cellOf returns the rendered table cell with the given id.
func cellOf(t *testing.T, page, id string) string {
	t.Helper()
	row := rowOf(t, page, id)
	if j := strings.Index(row, "</td>"); j >= 0 {
		return row[:j]
	}
	return row
}

// The page says what it does not know: a capacity nobody measured is
// marked assumed (no share colour), a declared one declared; a recovery
// shows its downtime until readiness, or that the job is not running
// again yet; a node without a building gets a labelled group.
func TestPageMarksAssumedFiguresAndDowntime(t *testing.T) {
	build := func() Status {
		s := scenarioA()
		s.Cluster.Bandwidth[1].Basis = BandwidthDeclared // eng → sci
		m := member("n9", "", MemberAlive, RaftNonvoter, gpuA6k, 1, 1, 0.1)
		s.Cluster.Members = append(s.Cluster.Members, m)
		s.Reclaims.History[0].Jobs = append(s.Reclaims.History[0].Jobs,
			ReclaimOutcome{Job: "gpt", To: "n4", Degraded: true, Reason: "recovered from the freshest committed replica", Resuming: true})
		return s
	}
	h := newTestHandler(t, Config{Source: newMemSource(build)})
	_, page := do(t, h, http.MethodGet, "/", "", nil)
	for id, want := range map[string]string{
		"bw-sci-sci": `class="unmeasured"`,
		"bw-eng-sci": `class="unmeasured"`,
		"bw-eng-eng": `class="bw8"`,
	} {
		if cell := cellOf(t, page, id); !strings.Contains(cell, want) {
			t.Errorf("cell %s lacks %s:\n%s", id, want, cell)
		}
	}
	if cell := cellOf(t, page, "bw-sci-sci"); !strings.Contains(cell, ">assumed</span>") || strings.Contains(cell, ">declared<") {
		t.Errorf("sci → sci, the default nobody measured: want the assumed mark alone:\n%s", cell)
	}
	if cell := cellOf(t, page, "bw-eng-sci"); !strings.Contains(cell, ">declared</span>") || strings.Contains(cell, ">assumed<") {
		t.Errorf("eng → sci, declared: want the declared mark alone:\n%s", cell)
	}
	if cell := cellOf(t, page, "bw-eng-eng"); strings.Contains(cell, ">assumed<") || strings.Contains(cell, ">declared<") {
		t.Errorf("eng → eng, measured: want no mark:\n%s", cell)
	}
	if !strings.Contains(page, "No building") || strings.Contains(page, "Building  <") {
		t.Errorf("the node without a building is not in a labelled group")
	}
	if li := rowOf(t, page, "outcome-n5-vit"); !strings.Contains(li, "down 1m01s") {
		t.Errorf("vit's recovery: want its downtime:\n%s", li)
	}
	if li := rowOf(t, page, "outcome-n5-gpt"); !strings.Contains(li, "not running again yet") || strings.Contains(li, "down ") {
		t.Errorf("gpt, placed but not ready: want 'not running again yet' and no downtime:\n%s", li)
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reclaimnet/reclaimnet/sim"
)

func runSimCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code := run(context.Background(), env, append([]string{"reclaimnet"}, args...))
	return code, out.String(), errb.String()
}

func TestSimCommandWritesTableJSONAndPlots(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runSimCLI(t, "sim", "--format", "md", "--days", "2", "--nodes", "12", "--policies", "b1p,b2,reclaimnet,b6", "--out", dir, "--gen-out", filepath.Join(dir, "trace"))
	if code != ExitOK {
		t.Fatalf("exit %d, want 0; stderr: %s", code, errs)
	}
	for _, want := range []string{"| system | work loss GPU-h", "| B1' Slurm requeue |", "| ReclaimNet |", "| B6 oracle (hindsight) |",
		"| system | emergency loss GPU-h |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "sim: running reclaimnet") {
		t.Errorf("no progress on stderr: %q", errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Rows []struct {
			Key  string `json:"key"`
			Mean struct {
				Breakdown *struct {
					Emergency *float64 `json:"emergency_loss_gpu_h"`
				} `json:"breakdown"`
			} `json:"mean"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Rows) != 4 {
		t.Fatalf("results.json: got %d rows (err %v), want 4", len(rep.Rows), err)
	}
	for _, r := range rep.Rows {
		if r.Mean.Breakdown == nil || r.Mean.Breakdown.Emergency == nil {
			t.Errorf("results.json row %s has no loss breakdown", r.Key)
		}
	}
	for _, f := range []string{"work_loss.svg", "downtime_cdf.svg", "hazard.svg", "trace/trace.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	// The written trace replays.
	code, out2, errs := runSimCLI(t, "sim", "-q", "--format", "md", "--trace", filepath.Join(dir, "trace"), "--policies", "b1p")
	if code != ExitOK || !strings.Contains(out2, "| B1' Slurm requeue |") {
		t.Fatalf("replay: exit %d, stderr %s, out %s", code, errs, out2)
	}
}

func TestSimCommandBadTraceNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "trace.jsonl")
	body := `{"kind":"header","format":"reclaimnet-trace","version":1,"start":"2026-01-05T00:00:00Z","duration_s":100}
{"kind":"return","t":5,"node":"ghost"}
`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runSimCLI(t, "sim", "--trace", dir)
	if code != ExitError || !strings.Contains(errs, "trace.jsonl:2:") || !strings.Contains(errs, `unknown node "ghost"`) {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming trace.jsonl:2 and the unknown node", code, errs)
	}
}

func TestSimCommandUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"sim", "--seeds", "x"}, {"sim", "extra"}, {"sim", "--nodes", "1"}, {"sim", "--bogus"},
		{"sim", "--changed-fraction", "0"}, {"sim", "--changed-fraction", "1.5"}, {"sim", "--b1-refresh", "-1s"}, {"sim", "--sweep", "--frontier"}} {
		if code, _, _ := runSimCLI(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
	code, _, errs := runSimCLI(t, "sim", "--policies", "b1p,nonsense")
	if code != ExitUsage || !strings.Contains(errs, `unknown policy "nonsense"`) {
		t.Fatalf("unknown policy: exit %d, stderr %q; want exit 2 naming it", code, errs)
	}
}

// TestSimCommandB1Refresh checks that a B1 refresh other than the table's
// is named in its row and not compared with the paper's 38 %.
func TestSimCommandB1Refresh(t *testing.T) {
	args := []string{"sim", "-q", "--format", "md", "--days", "5", "--nodes", "20", "--policies", "b1,reclaimnet"} // B1 loses work: the comparison line is printed
	code, out, errs := runSimCLI(t, args...)
	if code != ExitOK || !strings.Contains(out, "| B1 Bamboo-like |") || !strings.Contains(out, "reduction vs B1 Bamboo") {
		t.Fatalf("default refresh: exit %d, stderr %s, out %s", code, errs, out)
	}
	code, out, errs = runSimCLI(t, append(args, "--b1-refresh", "20m")...)
	if code != ExitOK || !strings.Contains(out, "| B1 Bamboo-like (20m0s refresh) |") || strings.Contains(out, "reduction vs B1 Bamboo") {
		t.Fatalf("20-min refresh: exit %d, stderr %s; want the refresh in the row and no paper comparison:\n%s", code, errs, out)
	}
}

// TestSimCommandFrontier checks the frontier's table and its JSON file.
func TestSimCommandFrontier(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runSimCLI(t, "sim", "-q", "--format", "md", "--days", "3", "--nodes", "12", "--frontier", "--out", dir)
	if code != ExitOK || !strings.Contains(out, "| ReclaimNet | Lmax 5m0s |") || !strings.Contains(out, "| B1 Bamboo-like | refresh 40m0s |") {
		t.Fatalf("exit %d, stderr %s; want the frontier table:\n%s", code, errs, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "frontier.json"))
	if err != nil {
		t.Fatal(err)
	}
	var points []struct {
		Policy string  `json:"policy"`
		TB     float64 `json:"checkpoint_tb"`
	}
	if err := json.Unmarshal(b, &points); err != nil || len(points) != 10 || points[0].Policy != "reclaimnet" {
		t.Fatalf("frontier.json: %d points (err %v), want 10 starting with ReclaimNet:\n%s", len(points), err, b)
	}
}

// TestSimCommandImport runs -import from the Bamboo traces built into the
// binary (no --traces), and from a directory of downloaded traces (here the
// synthetic fixtures in their formats); a trace that does not ship and is
// not given fails saying where to get it.
func TestSimCommandImport(t *testing.T) {
	code, out, errs := runSimCLI(t, "sim", "-q", "--import", "bamboo-g4dn", "--policies", "b1p")
	if code != ExitOK || !strings.Contains(out, "trace: Bamboo AWS g4dn spot (79 nodes") {
		t.Fatalf("built-in Bamboo trace: exit %d, stderr %s, out %s", code, errs, out)
	}
	code, out, errs = runSimCLI(t, "sim", "-q", "--import", "microsoft99", "--workload", "philly", "--traces", filepath.Join("..", "sim", "testdata", "traces"), "--policies", "b1p")
	if code != ExitOK || !strings.Contains(out, "trace: microsoft99 desktops (54 nodes, 14.0 days), workload philly") {
		t.Fatalf("--traces DIR: exit %d, stderr %s, out %s", code, errs, out)
	}
	code, _, errs = runSimCLI(t, "sim", "-q", "--import", "microsoft99", "--policies", "b1p")
	if code != ExitError || !strings.Contains(errs, "microsoft99_desktop/PingData00.txt") || !strings.Contains(errs, "-traces DIR") {
		t.Fatalf("missing trace: exit %d, stderr %q; want exit 1 naming the file and --traces DIR", code, errs)
	}
}

// TestSimCommandTextTable: by default the tables are aligned columns, the
// same figures as --format md in the same order; a bad --format is a
// usage error.
func TestSimCommandTextTable(t *testing.T) {
	args := []string{"sim", "-q", "--days", "2", "--nodes", "12", "--policies", "b2,reclaimnet"}
	code, text, errs := runSimCLI(t, args...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	code, md, errs := runSimCLI(t, append(args, "--format", "md")...)
	if code != ExitOK {
		t.Fatalf("--format md: exit %d, stderr %s", code, errs)
	}
	if strings.Contains(text, "|") || strings.Contains(text, "---") {
		t.Errorf("text output still has Markdown table syntax:\n%s", text)
	}
	if got := sim.TextTables(md); got != text {
		t.Errorf("text output is not the Markdown output laid out:\n got %s\nwant %s", text, got)
	}
	// The first table's rows start their columns at the same offsets as
	// the header: each row's cells end where the rule's dashes end.
	lines := strings.Split(text, "\n")
	rule := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "─") })
	if rule < 1 {
		t.Fatalf("no rule under a header:\n%s", text)
	}
	for _, row := range lines[rule+1 : rule+3] {
		if w, rw := utf8.RuneCountInString(row), utf8.RuneCountInString(lines[rule]); w != rw {
			t.Errorf("row %q is %d wide, the rule %d: columns not aligned", row, w, rw)
		}
	}
	if code, _, errs := runSimCLI(t, append(args, "--format", "html")...); code != ExitUsage || !strings.Contains(errs, "--format") {
		t.Errorf("--format html: exit %d (%s), want %d naming the flag", code, errs, ExitUsage)
	}
}

// TestSimCommandImportSeeds: with --import, each seed of --seeds draws its
// own workload, so the mean over --seeds 1,2 is the mean of the two
// single-seed runs, not the first seed's figure repeated.
func TestSimCommandImportSeeds(t *testing.T) {
	loss := func(seeds string) float64 {
		t.Helper()
		code, out, errs := runSimCLI(t, "sim", "-q", "--import", "bamboo-g4dn", "--policies", "b1p", "--seeds", seeds)
		if code != ExitOK {
			t.Fatalf("--seeds %s: exit %d: %s", seeds, code, errs)
		}
		for _, line := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(line, "B1' Slurm requeue"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					v, err := strconv.ParseFloat(f[0], 64)
					if err != nil {
						t.Fatalf("--seeds %s: work loss %q: %v", seeds, f[0], err)
					}
					return v
				}
			}
		}
		t.Fatalf("--seeds %s: no B1' row in\n%s", seeds, out)
		return 0
	}
	one, two, both := loss("1"), loss("2"), loss("1,2")
	if one == two {
		t.Fatalf("seeds 1 and 2 both lose %.2f GPU-h: the seed draws no workload of its own", one)
	}
	if mean := (one + two) / 2; math.Abs(both-mean) > 0.011 {
		t.Errorf("--seeds 1,2 loses %.2f GPU-h, want the mean of %.2f and %.2f (%.3f)", both, one, two, mean)
	}
}

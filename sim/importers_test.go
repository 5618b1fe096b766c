package sim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reclaimnet/reclaimnet/trace"
)

// sharedTraces finds ../shared/traces beside the repository root (the
// directory holding go.mod). Missing traces fail under CI=true and skip
// otherwise.
func sharedTraces(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
	traces := filepath.Join(dir, "..", "shared", "traces")
	if _, err := os.Stat(traces); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("shared traces missing at %s (CI must provide ../shared/traces): %v", traces, err)
		}
		t.Skipf("shared traces not found at %s; skipping the real-trace importer tests", traces)
	}
	return traces
}

func TestImportMicrosoftDesktops(t *testing.T) {
	c := DefaultImportConfig(sharedTraces(t))
	tr, err := Import(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes) != 54 {
		t.Fatalf("nodes: got %d, want 54 sampled desktops", len(tr.Nodes))
	}
	if d := tr.Header.DurationS / 86400; d < 34.9 || d > 35.1 {
		t.Fatalf("duration: got %.2f days, want 35 (840 hourly columns)", d)
	}
	em := 0
	for _, d := range tr.Departures {
		if d.Type == trace.Emergency {
			em++
		}
	}
	// 1,000 desktops, 15,836 departures over 35 days: a 54-machine sample
	// sees several hundred.
	if n := len(tr.Departures); n < 300 || n > 2000 {
		t.Fatalf("departures: got %d, want several hundred for 54 desktops", n)
	}
	if f := float64(em) / float64(len(tr.Departures)); f < 0.35 || f > 0.49 {
		t.Fatalf("emergency share: got %.2f, want about 0.42 (ScheduledFraction 0.58)", f)
	}
	if len(tr.Jobs) == 0 {
		t.Fatal("no jobs")
	}
	// The imported trace is valid in the documented format.
	dir := t.TempDir()
	if err := trace.Save(dir, tr); err != nil {
		t.Fatal(err)
	}
	back, err := trace.Load(dir)
	if err != nil {
		t.Fatalf("imported trace does not parse back: %v", err)
	}
	if len(back.Departures) != len(tr.Departures) || len(back.Returns) != len(tr.Returns) {
		t.Fatalf("round trip: got %d/%d departures/returns, want %d/%d", len(back.Departures), len(back.Returns), len(tr.Departures), len(tr.Returns))
	}
	r, err := RunPolicy(tr, "b1p", DefaultOptions(), 1, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	if r.CompletedJobs == 0 {
		t.Fatalf("no job completed on the desktop trace")
	}
}

func TestImportBambooSpot(t *testing.T) {
	for _, tc := range []struct {
		src   string
		nodes int
	}{{DeparturesBambooP3, 177}, {DeparturesBambooG4, 79}} {
		t.Run(tc.src, func(t *testing.T) {
			c := DefaultImportConfig(sharedTraces(t))
			c.Departures = tc.src
			tr, err := Import(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Nodes) != tc.nodes {
				t.Fatalf("nodes: got %d, want %d instances", len(tr.Nodes), tc.nodes)
			}
			for _, d := range tr.Departures {
				if d.Type != trace.Emergency {
					t.Fatalf("spot preemption imported as %s, want emergency", d.Type)
				}
			}
			if len(tr.Departures) == 0 {
				t.Fatal("no departures")
			}
			absent := 0
			for _, n := range tr.Nodes {
				if n.Absent {
					absent++
				}
			}
			if absent == 0 {
				t.Fatal("no instance joins late; the spot traces add instances over time")
			}
			if _, err := trace.Read(strings.NewReader(mustWrite(t, tr)), "imported"); err != nil {
				t.Fatalf("imported trace invalid: %v", err)
			}
		})
	}
}

func TestImportWorkloads(t *testing.T) {
	for _, w := range []string{WorkloadAlibaba, WorkloadPhilly} {
		t.Run(w, func(t *testing.T) {
			c := DefaultImportConfig(sharedTraces(t))
			c.Workload = w
			tr, err := Import(c)
			if err != nil {
				t.Fatal(err)
			}
			if want := 182; len(tr.Jobs) != want { // 312 jobs per 60 days → 35 days
				t.Fatalf("jobs: got %d, want %d", len(tr.Jobs), want)
			}
			for _, j := range tr.Jobs {
				if j.GPUs < 1 || j.GPUs > 4 || j.WorkGPUh <= 0 || j.CheckpointMB < 120 || j.CheckpointMB > 48000 {
					t.Fatalf("bad job %+v", j)
				}
			}
		})
	}
}

func TestImportErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	norm := filepath.Join(dir, "bamboo_spot", "normalized")
	if err := os.MkdirAll(norm, 0o755); err != nil {
		t.Fatal(err)
	}
	body := "unit,state,start_s,end_s,end_kind\nnode1,up,0,100,transition\nnode2,sideways,0,5,transition\n"
	if err := os.WriteFile(filepath.Join(norm, "p3-trace_intervals.csv"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c := DefaultImportConfig(dir)
	c.Departures = DeparturesBambooP3
	_, err := Import(c)
	var pe *trace.ParseError
	if !errors.As(err, &pe) || pe.Line != 3 || !strings.Contains(err.Error(), "p3-trace_intervals.csv:3:") {
		t.Fatalf("got %v, want an error at p3-trace_intervals.csv:3", err)
	}
}

func mustWrite(t *testing.T, tr *trace.Trace) string {
	t.Helper()
	var b strings.Builder
	if err := trace.Write(&b, tr); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

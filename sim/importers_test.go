package sim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reclaimnet/reclaimnet/trace"
)

// TestImportMicrosoftDesktops imports the synthetic ping matrix of
// testdata/traces in the microsoft99 format (the real one does not ship).
func TestImportMicrosoftDesktops(t *testing.T) {
	c := DefaultImportConfig(fixtureTraces)
	tr, err := Import(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes) != c.Machines || c.Machines >= fixtureMachines {
		t.Fatalf("nodes: got %d, want a sample of %d of the %d machines", len(tr.Nodes), c.Machines, fixtureMachines)
	}
	if got, want := tr.Header.DurationS, float64(fixtureHours*3600); got != want {
		t.Fatalf("duration: got %.0f s, want %.0f (one column per hour)", got, want)
	}
	absent := 0
	for _, n := range tr.Nodes {
		if n.Absent {
			absent++
		}
	}
	if absent == 0 || absent > len(tr.Nodes)/2 {
		t.Fatalf("absent at start: got %d of %d, want the few machines whose first hour is 0", absent, len(tr.Nodes))
	}
	em := 0
	for _, d := range tr.Departures {
		if d.Type == trace.Emergency {
			em++
		}
	}
	// 54 machines over two weeks, each leaving every 12-200 hours up.
	if n := len(tr.Departures); n < 200 || n > 1500 {
		t.Fatalf("departures: got %d, want several hundred", n)
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

// TestImportBambooSpot imports the real Bamboo traces, from the copies
// embedded in the binary.
func TestImportBambooSpot(t *testing.T) {
	for _, tc := range []struct {
		src   string
		nodes int
	}{{DeparturesBambooP3, 177}, {DeparturesBambooG4, 79}} {
		t.Run(tc.src, func(t *testing.T) {
			c := DefaultImportConfig("")
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

// TestImportWorkloads imports the synthetic Alibaba and Philly files of
// testdata/traces onto the synthetic desktops.
func TestImportWorkloads(t *testing.T) {
	for _, w := range []string{WorkloadAlibaba, WorkloadPhilly} {
		t.Run(w, func(t *testing.T) {
			c := DefaultImportConfig(fixtureTraces)
			c.Workload = w
			tr, err := Import(c)
			if err != nil {
				t.Fatal(err)
			}
			if want := 73; len(tr.Jobs) != want { // 312 jobs per 60 days → 14 days
				t.Fatalf("jobs: got %d, want %d", len(tr.Jobs), want)
			}
			four := 0
			for _, j := range tr.Jobs {
				if j.GPUs < 1 || j.GPUs > 4 || j.WorkGPUh < float64(j.GPUs)/6-1e-9 || j.CheckpointMB < 120 || j.CheckpointMB > 48000 {
					t.Fatalf("bad job %+v (want 1-4 GPUs, at least 10 min of work, a 120 MB-48 GB checkpoint)", j)
				}
				if j.GPUs == 4 {
					four++
				}
			}
			if four == 0 {
				t.Fatal("no 4-GPU job; 4- and 8-GPU pods (capped at 4) and the generator's 15 % share should give some")
			}
		})
	}
}

// TestImportErrorsNameFileAndLine also shows that a file in -traces DIR
// takes the place of the embedded copy.
func TestImportErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	aws := filepath.Join(dir, "bamboo_spot", "aws")
	if err := os.MkdirAll(aws, 0o755); err != nil {
		t.Fatal(err)
	}
	body := "0,add,node1\n0,add,node2\n100000,vanish,node2\n"
	if err := os.WriteFile(filepath.Join(aws, "p3-trace.csv"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c := DefaultImportConfig(dir)
	c.Departures = DeparturesBambooP3
	_, err := Import(c)
	var pe *trace.ParseError
	if !errors.As(err, &pe) || pe.Line != 3 || !strings.Contains(err.Error(), "p3-trace.csv:3:") {
		t.Fatalf("got %v, want an error at p3-trace.csv:3", err)
	}
}

// TestImportMissingWorkloadSaysWhere: the workload traces do not ship, so
// importing one without -traces names where to download it.
func TestImportMissingWorkloadSaysWhere(t *testing.T) {
	c := DefaultImportConfig("")
	c.Departures, c.Workload = DeparturesBambooG4, WorkloadPhilly
	_, err := Import(c)
	if err == nil || !strings.Contains(err.Error(), "philly_runtime/philly_runtime.csv") || !strings.Contains(err.Error(), "github.com/alibaba/clusterdata") {
		t.Fatalf("got %v, want an error naming the file and where to download it", err)
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

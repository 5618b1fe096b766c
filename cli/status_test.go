package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/web"
)

func TestJobsTable(t *testing.T) {
	var buf bytes.Buffer
	printJobs(&buf, []web.Job{
		{ID: "llama", State: "running", Node: "gpu-01", Restarts: 2,
			Decision:       &web.JobDecision{Interval: 150 * time.Second, Hazard: 0.5 / 3600, Bandwidth: 12.5e6, LossBudgetInfeasible: true},
			LastCheckpoint: &web.Checkpoint{Version: 7, Age: 90 * time.Second, Holders: []policy.NodeID{"gpu-02", "gpu-03"}}},
		{ID: "queued", State: "pending"},
	})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("table has %d lines, want 3:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"llama", "running", "gpu-01", "2m30s (loss budget infeasible)", "0.5/h", "100Mb/s", "v7, 1m30s old, on 2 node(s)", "  2"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q lacks %q", lines[1], want)
		}
	}
	if f := strings.Fields(lines[2]); len(f) != 8 || f[1] != "pending" || f[2] != "-" || f[3] != "-" || f[7] != "0" {
		t.Errorf("row %q: want pending, no node, no interval, 0 restarts", lines[2])
	}
	buf.Reset()
	printJobs(&buf, nil)
	if got := buf.String(); got != "No jobs.\n" {
		t.Errorf("no jobs: got %q, want %q", got, "No jobs.\n")
	}
}

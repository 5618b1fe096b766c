package sim

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/trace"
)

// TestFrontier: on a ten-day calibrated trace the frontier's ReclaimNet
// row at the generator's 5-min loss budget is the table's ReclaimNet run;
// a longer loss budget or refresh sends less checkpoint traffic at the
// ends of each range; the trace passed in is left unchanged.
func TestFrontier(t *testing.T) {
	tr, err := Generate(shortConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	budget := tr.Jobs[0].LossBudgetS
	points, err := Frontier(func(uint64) (*trace.Trace, error) { return tr, nil }, []uint64{1}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != len(FrontierLossBudgets)+len(FrontierRefreshes) {
		t.Fatalf("%d points, want %d", len(points), len(FrontierLossBudgets)+len(FrontierRefreshes))
	}
	for _, j := range tr.Jobs {
		if j.LossBudgetS != budget {
			t.Fatalf("job %s's loss budget changed to %v s: the frontier must work on a copy", j.ID, j.LossBudgetS)
		}
	}
	table, err := RunPolicy(tr, "reclaimnet", DefaultOptions(), 1, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	var rn, b1 []FrontierPoint
	for _, p := range points {
		if p.Policy == "reclaimnet" {
			rn = append(rn, p)
			if p.Knob.Seconds() == budget && (p.WorkLossGPUh != table.WorkLossGPUh || p.CheckpointTB != table.CheckpointTB) {
				t.Errorf("Lmax %v: %.4f GPU-h, %.4f TB; the table's run (same budget) %.4f, %.4f", p.Knob, p.WorkLossGPUh, p.CheckpointTB, table.WorkLossGPUh, table.CheckpointTB)
			}
		} else {
			b1 = append(b1, p)
		}
	}
	for _, s := range [][]FrontierPoint{rn, b1} {
		if first, last := s[0], s[len(s)-1]; first.CheckpointTB <= last.CheckpointTB {
			t.Errorf("%s: %v sends %.3f TB, not more than %v's %.3f", first.Policy, first.Knob, first.CheckpointTB, last.Knob, last.CheckpointTB)
		}
	}
	var out bytes.Buffer
	WriteFrontier(&out, points)
	if !strings.Contains(out.String(), "| ReclaimNet | Lmax 5m0s |") || !strings.Contains(out.String(), "| B1 Bamboo-like | refresh 2m0s |") {
		t.Errorf("table lacks the expected rows:\n%s", out.String())
	}
}

// TestB1LossAt: on points that follow a power law exactly, the log-log
// interpolation gives the power law's value at every traffic in range,
// and nothing outside it; ReclaimNet points are ignored.
func TestB1LossAt(t *testing.T) {
	law := func(tb float64) float64 { return 100 * math.Pow(tb, -0.9) }
	points := []FrontierPoint{{Policy: "reclaimnet", CheckpointTB: 25, WorkLossGPUh: 0.001}}
	for _, tb := range []float64{40, 10, 20} { // any order
		points = append(points, FrontierPoint{Policy: "b1", Knob: time.Duration(tb) * time.Minute, CheckpointTB: tb, WorkLossGPUh: law(tb)})
	}
	for tb := 10.0; tb <= 40; tb += 0.5 {
		got, ok := B1LossAt(points, tb)
		if !ok || math.Abs(got-law(tb)) > 1e-9*law(tb) {
			t.Fatalf("at %.1f TB: got %v, %v; want %v", tb, got, ok, law(tb))
		}
	}
	for _, tb := range []float64{9.9, 40.1} {
		if _, ok := B1LossAt(points, tb); ok {
			t.Errorf("at %.1f TB (outside 10–40): got a value", tb)
		}
	}
}

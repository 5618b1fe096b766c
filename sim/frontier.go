package sim

import (
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/trace"
)

// FrontierPoint is one setting on the work loss / checkpoint traffic
// frontier, averaged over seeds.
type FrontierPoint struct {
	// Policy is "reclaimnet" or "b1".
	Policy string `json:"policy"`
	// Knob is every job's loss budget Lmax for ReclaimNet (P1.5's ceiling
	// 2·Lmax), the peer refresh interval for B1.
	Knob           time.Duration `json:"knob_ns"`
	WorkLossGPUh   float64       `json:"work_loss_gpu_h"`
	CheckpointTB   float64       `json:"checkpoint_tb"`
	DegradationPct float64       `json:"research_degradation_pct"`
}

// The knobs the frontier tries.
var (
	FrontierLossBudgets = []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute}
	FrontierRefreshes   = []time.Duration{2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute}
)

// Frontier runs ReclaimNet at each of FrontierLossBudgets (every job's
// Lmax replaced) and B1 at each of FrontierRefreshes on the seeds'
// traces: what each loses for the checkpoint traffic it sends. B1's
// 2-minute refresh beats ReclaimNet on work loss by sending several times
// its traffic, which the work-loss column does not charge; this is the
// comparison at equal traffic, and an operator's view of what a tighter
// loss budget costs the network.
func Frontier(traceFor func(seed uint64) (*trace.Trace, error), seeds []uint64, opts Options) ([]FrontierPoint, error) {
	type run struct {
		point int
		tr    *trace.Trace
		seed  uint64
		key   string
		tune  Tuning
	}
	var points []FrontierPoint
	for _, l := range FrontierLossBudgets {
		points = append(points, FrontierPoint{Policy: "reclaimnet", Knob: l})
	}
	for _, r := range FrontierRefreshes {
		points = append(points, FrontierPoint{Policy: "b1", Knob: r})
	}
	var runs []run
	for _, seed := range seeds {
		tr, err := traceFor(seed)
		if err != nil {
			return nil, err
		}
		for i, p := range points {
			if p.Policy == "reclaimnet" {
				runs = append(runs, run{point: i, tr: withLossBudget(tr, p.Knob), seed: seed, key: "reclaimnet"})
			} else {
				runs = append(runs, run{point: i, tr: tr, seed: seed, key: "b1", tune: Tuning{BambooRefresh: p.Knob}})
			}
		}
	}
	results := make([]Result, len(runs))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, r := range runs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = RunPolicy(r.tr, r.key, opts, r.seed, r.tune)
		})
	}
	wg.Wait()
	n := float64(len(seeds))
	for i, r := range runs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		p := &points[r.point]
		p.WorkLossGPUh += results[i].WorkLossGPUh / n
		p.CheckpointTB += results[i].CheckpointTB / n
		p.DegradationPct += results[i].DegradationPct / n
	}
	return points, nil
}

// withLossBudget returns a copy of tr in which every job's loss budget is
// l (tr is not changed).
func withLossBudget(tr *trace.Trace, l time.Duration) *trace.Trace {
	c := *tr
	c.Jobs = append([]trace.JobRec(nil), tr.Jobs...)
	for i := range c.Jobs {
		c.Jobs[i].LossBudgetS = l.Seconds()
	}
	return &c
}

// B1LossAt is B1's work loss at tb TB of checkpoint traffic, interpolated
// between the two B1 points around it, linearly in log(loss) against
// log(traffic) (loss falls roughly as a power of traffic; a straight line
// between the points would overstate it); false outside B1's range.
func B1LossAt(points []FrontierPoint, tb float64) (float64, bool) {
	var b1 []FrontierPoint
	for _, p := range points {
		if p.Policy == "b1" && p.CheckpointTB > 0 && p.WorkLossGPUh > 0 {
			b1 = append(b1, p)
		}
	}
	sort.Slice(b1, func(i, j int) bool { return b1[i].CheckpointTB < b1[j].CheckpointTB })
	for i := 1; i < len(b1); i++ {
		lo, hi := b1[i-1], b1[i]
		if tb < lo.CheckpointTB || tb > hi.CheckpointTB {
			continue
		}
		if hi.CheckpointTB == lo.CheckpointTB {
			return lo.WorkLossGPUh, true
		}
		f := math.Log(tb/lo.CheckpointTB) / math.Log(hi.CheckpointTB/lo.CheckpointTB)
		return math.Exp(math.Log(lo.WorkLossGPUh) + f*math.Log(hi.WorkLossGPUh/lo.WorkLossGPUh)), true
	}
	return 0, false
}

// WriteFrontier prints the frontier; each ReclaimNet row gives B1's loss
// at the same checkpoint traffic (B1LossAt) and how much less ReclaimNet
// loses.
func WriteFrontier(w io.Writer, points []FrontierPoint) {
	fmt.Fprintln(w, "| policy | knob | work loss GPU-h | checkpoint traffic TB | research degradation % | B1 at this traffic GPU-h | ReclaimNet's loss vs B1's |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, p := range points {
		name, knob, atB1, vs := "ReclaimNet", "Lmax "+p.Knob.String(), "—", "—"
		if p.Policy == "b1" {
			name, knob = "B1 Bamboo-like", "refresh "+p.Knob.String()
		} else if l, ok := B1LossAt(points, p.CheckpointTB); ok {
			atB1, vs = fmt.Sprintf("%.2f", l), fmt.Sprintf("%+.0f %%", 100*(p.WorkLossGPUh/l-1))
		}
		fmt.Fprintf(w, "| %s | %s | %.2f | %.2f | %.1f | %s | %s |\n", name, knob, p.WorkLossGPUh, p.CheckpointTB, p.DegradationPct, atB1, vs)
	}
	fmt.Fprintln(w, "\nB1 at this traffic: interpolated between its two refreshes around that traffic (log loss against log traffic); — outside their range.")
}

// SaveFrontier writes the points to dir/frontier.json.
func SaveFrontier(dir string, points []FrontierPoint) error {
	return writeJSON(dir, "frontier.json", points)
}

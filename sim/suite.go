package sim

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/trace"
)

// PolicyKeys lists the policies of the docs/design.md §5 table in its order.
var PolicyKeys = []string{"b1p", "b2", "b3", "b1", "b4", "b5", "b7", "reclaimnet", "b6"}

// AblationKeys are the 8 subsets of {P1, P2, P3}.
var AblationKeys = []string{"none", "p1", "p2", "p3", "p1p2", "p1p3", "p2p3", "p1p2p3"}

// KnownPolicy reports whether key names a policy or an ablation subset.
func KnownPolicy(key string) bool {
	for _, k := range append(append([]string(nil), PolicyKeys...), AblationKeys...) {
		if k == key {
			return true
		}
	}
	return false
}

// Tuning overrides ReclaimNet's parameters (the sensitivity sweeps) and
// B1's refresh interval (to compare work loss at equal checkpoint traffic).
type Tuning struct {
	BetaP1, Alpha, BetaP3 float64 // 0 keeps the default
	// BambooRefresh replaces B1's 2-minute peer refresh; 0 keeps it.
	BambooRefresh time.Duration
}

// DefaultBambooRefresh is B1's peer refresh interval in the docs/design.md §5 table.
const DefaultBambooRefresh = 2 * time.Minute

func (t Tuning) apply(p policy.Params) policy.Params {
	if t.BetaP1 > 0 {
		p.BetaP1 = t.BetaP1
	}
	if t.Alpha > 0 {
		p.Alpha = t.Alpha
	}
	if t.BetaP3 > 0 {
		p.BetaP3 = t.BetaP3
	}
	return p
}

// NewController returns the controller for a policy key.
func NewController(key string, tr *trace.Trace, opts Options, seed uint64, tune Tuning) (Controller, error) {
	params := tune.apply(policy.DefaultParams())
	params.Seed = seed
	switches := func(s string) policy.Switches {
		return policy.Switches{P1: strings.Contains(s, "p1"), P2: strings.Contains(s, "p2"), P3: strings.Contains(s, "p3")}
	}
	tickCtl := func(label string, sw policy.Switches) (Controller, error) {
		p := params
		p.Switches = sw
		return NewTickController(label, p)
	}
	switch key {
	case "b1p":
		return SlurmRequeue{Interval: 10 * time.Minute, Delay: 30 * time.Second}, nil
	case "b2":
		return NoMigration{}, nil
	case "b1":
		refresh := DefaultBambooRefresh
		if tune.BambooRefresh > 0 {
			refresh = tune.BambooRefresh
		}
		return BambooLike{Interval: refresh, Delay: 10 * time.Second, RedundancyOverhead: 0.15}, nil
	case "b6":
		return Oracle{Period: opts.ControlPeriod, Safety: 2}, nil
	case "b3":
		return tickCtl("B3 static interval", policy.Switches{})
	case "b4":
		return tickCtl("B4 random destination", policy.Switches{P1: true, P3: true})
	case "b5":
		return tickCtl("B5 no traffic enforcement", policy.Switches{P1: true, P2: true})
	case "b7":
		c, err := tickCtl("B7 time-varying fixed interval", policy.Switches{P1: true, P2: true, P3: true})
		if err != nil {
			return nil, err
		}
		c.(*TickController).IntervalOverride = TimeVaryingInterval(tr)
		return c, nil
	case "reclaimnet", "p1p2p3":
		return tickCtl("ReclaimNet", switches("p1p2p3"))
	case "none":
		return tickCtl("ablation: none", policy.Switches{})
	case "p1", "p2", "p3", "p1p2", "p1p3", "p2p3":
		return tickCtl("ablation: "+ablationLabel(key), switches(key))
	}
	return nil, fmt.Errorf("unknown policy %q (known: %s, %s)", key, strings.Join(PolicyKeys, ", "), strings.Join(AblationKeys, ", "))
}

// RunPolicy replays tr through one policy.
func RunPolicy(tr *trace.Trace, key string, opts Options, seed uint64, tune Tuning) (Result, error) {
	if key == "b3" {
		return runStatic(tr, opts, seed, tune)
	}
	if key == "b6" {
		opts.ControlPeriod = time.Minute // the oracle times its moves to the minute
	}
	ctrl, err := NewController(key, tr, opts, seed, tune)
	if err != nil {
		return Result{}, err
	}
	return runController(tr, ctrl, opts, seed)
}

func runController(tr *trace.Trace, ctrl Controller, opts Options, seed uint64) (Result, error) {
	start := time.Now()
	e, err := NewEngine(tr, ctrl, opts)
	if err != nil {
		return Result{}, err
	}
	r := e.Run()
	if e.stopped != nil {
		return r, fmt.Errorf("%s stopped: %w", ctrl.Name(), e.stopped)
	}
	r.Seed = seed
	r.Trace = tr.Header.Name
	r.WallS = time.Since(start).Seconds()
	if tc, ok := ctrl.(*TickController); ok {
		if tc.err != nil {
			return r, tc.err
		}
		r.HazardSeries = tc.HazardSeries()
		r.PredictedGap = tc.PredictedGap()
	}
	return r, nil
}

// runStatic is B3: the Appendix C interval from the trace's own means,
// then the paper's grid search over {0.5, 1, 1.5}·Δ on the same trace
// (hindsight the paper grants this baseline); the best run is reported.
func runStatic(tr *trace.Trace, opts Options, seed uint64, tune Tuning) (Result, error) {
	base := StaticInterval(tr)
	factors := []float64{0.5, 1, 1.5}
	results := make([]Result, len(factors))
	errs := make([]error, len(factors))
	var wg sync.WaitGroup
	for i, f := range factors {
		wg.Go(func() {
			ctrl, err := NewController("b3", tr, opts, seed, tune)
			if err != nil {
				errs[i] = err
				return
			}
			tc := ctrl.(*TickController)
			tc.Params.FixedInterval = time.Duration(float64(base) * f).Round(time.Second)
			results[i], errs[i] = runController(tr, tc, opts, seed)
			results[i].Policy = fmt.Sprintf("B3 static interval (%v)", tc.Params.FixedInterval)
		})
	}
	wg.Wait()
	best := -1
	for i := range factors {
		if errs[i] != nil {
			return Result{}, errs[i]
		}
		if best < 0 || results[i].WorkLossGPUh < results[best].WorkLossGPUh {
			best = i
		}
	}
	return results[best], nil
}

// ablationLabel turns "p1p3" into "P1+P3".
func ablationLabel(key string) string {
	var parts []string
	for _, p := range []string{"p1", "p2", "p3"} {
		if strings.Contains(key, p) {
			parts = append(parts, strings.ToUpper(p))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

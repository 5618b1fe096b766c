package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/sim"
	"github.com/reclaimnet/reclaimnet/trace"
)

func init() {
	register(&command{
		name:     "sim",
		synopsis: "replay a reclaim trace through ReclaimNet and the baselines",
		usage: `reclaimnet sim [-trace DIR|FILE | -import SRC] [-policies LIST] [-seeds LIST] [-out DIR] [-ablation] [flags]

With no flags, generates the calibrated two-month 54-node campus trace
(docs/design.md §0) and prints a table shaped like the paper's (design §5).
-trace replays a trace in the documented format (trace/README.md) instead;
-import builds one from a public departure trace (microsoft99, bamboo-p3,
bamboo-g4dn) with a -workload (generator, alibaba, philly): the Bamboo
traces are built into the binary, the others are read from -traces DIR
(docs/sim.md says where to download each). -gen-out writes the generated or
imported trace so it can be inspected or replayed. -out receives
results.json and SVG plots (cumulative work loss, downtime CDF, estimated vs
true hazard). -frontier prints work loss against checkpoint traffic instead
(ReclaimNet at several loss budgets, B1 at several refreshes): the
comparison at equal traffic, and what a tighter loss budget costs the
network.`,
		run: runSim,
	})
}

func runSim(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "sim")
	tracePath := fs.String("trace", "", "trace directory or file (default: the calibrated generator)")
	policies := fs.String("policies", strings.Join(sim.PolicyKeys, ","), "comma-separated policies: "+strings.Join(sim.PolicyKeys, ",")+" or ablation subsets "+strings.Join(sim.AblationKeys, ","))
	ablation := fs.Bool("ablation", false, "run the 8 subsets of {P1,P2,P3} instead of -policies")
	seedList := fs.String("seeds", "1", "comma-separated generator seeds (ignored with -trace except as P2-off seeds)")
	out := fs.String("out", "", "directory for results.json and SVG plots")
	genOut := fs.String("gen-out", "", "also write the generated trace (first seed) to this directory")
	nodes := fs.Int("nodes", 54, "generator: number of nodes")
	days := fs.Float64("days", 60, "generator: trace length in days")
	period := fs.Duration("period", 10*time.Minute, "longest gap between two controller runs (it also runs on every event and bandwidth sample)")
	drift := fs.Float64("drift", 0, "generator: multiply the hazard by this factor from mid-trace (e.g. 1.7)")
	lossBudget := fs.Duration("loss-budget", 0, "generator: give every job this loss budget Lmax (default 5 min, the paper's Δ*/2)")
	correlated := fs.Bool("correlated", false, "generator: add groups of nodes leaving together (building-wide events, lab power-offs, labs closing every evening; docs/sim.md)")
	storage := fs.Int("storage", 0, "add this many storage nodes (machine-room servers that keep checkpoints, host no jobs, never leave) to the generated, imported or replayed trace")
	changed := fs.Float64("changed-fraction", 1, "share of a checkpoint that differs from the job's previous one (what a hand-off to a pre-synced standby still moves), in (0,1]")
	betaP1 := fs.Float64("beta-p1", 0, "override β (P1.5)")
	alpha := fs.Float64("alpha", 0, "override α (P2.5)")
	betaP3 := fs.Float64("beta-p3", 0, "override β3 (P3.2)")
	b1Refresh := fs.Duration("b1-refresh", 0, "replace B1's 2-min peer refresh (to compare work loss at equal checkpoint traffic; the row is labelled with it)")
	quiet := fs.Bool("q", false, "no progress output")
	sweep := fs.Bool("sweep", false, "run ReclaimNet's sensitivity sweep (β_p1, α, β_p3) instead of the table")
	frontier := fs.Bool("frontier", false, "instead of the table: work loss against checkpoint traffic, ReclaimNet at several loss budgets and B1 at several refreshes (mean over -seeds)")
	importDeps := fs.String("import", "", "build the trace from a public departure trace: microsoft99, bamboo-p3 or bamboo-g4dn")
	workload := fs.String("workload", "generator", "with -import: generator, alibaba or philly")
	tracesDir := fs.String("traces", "", "with -import: directory of downloaded public traces (docs/sim.md); the Bamboo traces are built in")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("sim takes no arguments")
	}
	var seeds []uint64
	for _, s := range strings.Split(*seedList, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return usagef("bad seed %q", s)
		}
		seeds = append(seeds, v)
	}
	keys := strings.Split(*policies, ",")
	if *ablation {
		keys = sim.AblationKeys
	}
	for _, k := range keys {
		if !sim.KnownPolicy(k) {
			return usagef("unknown policy %q (known: %s; ablation: %s)", k, strings.Join(sim.PolicyKeys, ","), strings.Join(sim.AblationKeys, ","))
		}
	}
	if *nodes < 2 || *days <= 0 {
		return usagef("-nodes must be ≥ 2 and -days positive")
	}
	cfg := sim.DefaultGenConfig()
	cfg.Nodes = *nodes
	cfg.Duration = time.Duration(*days * 24 * float64(time.Hour))
	scale := float64(*nodes) / 54 * *days / 60
	cfg.Departures *= scale
	cfg.Jobs = int(float64(cfg.Jobs) * scale)
	cfg.GPUHours *= scale
	if *drift > 0 {
		cfg.DriftAt, cfg.DriftFactor = cfg.Duration/2, *drift
	}
	if *changed <= 0 || *changed > 1 {
		return usagef("-changed-fraction must be in (0,1], got %v", *changed)
	}
	if *lossBudget < 0 {
		return usagef("-loss-budget must not be negative")
	}
	if *b1Refresh < 0 {
		return usagef("-b1-refresh must not be negative")
	}
	if *lossBudget > 0 {
		cfg.LossBudgetMin, cfg.LossBudgetMax = *lossBudget, *lossBudget
	}
	if *correlated {
		cfg.Groups = sim.DefaultGroupConfig()
	}
	if *storage < 0 {
		return usagef("-storage must not be negative")
	}
	var loaded *trace.Trace
	if *importDeps != "" && *tracePath != "" {
		return usagef("-import and -trace exclude each other")
	}
	if *importDeps != "" {
		ic := sim.DefaultImportConfig(*tracesDir)
		ic.Departures, ic.Workload, ic.Seed = *importDeps, *workload, seeds[0]
		t, err := sim.Import(ic)
		if err != nil {
			return err
		}
		loaded = sim.AddStorage(t, *storage)
		if *genOut != "" {
			if err := trace.Save(*genOut, loaded); err != nil {
				return err
			}
		}
	}
	if *tracePath != "" {
		t, err := trace.Load(*tracePath)
		if err != nil {
			return err
		}
		loaded = sim.AddStorage(t, *storage)
	}
	traceFor := func(seed uint64) (*trace.Trace, error) {
		if loaded != nil {
			return loaded, nil
		}
		c := cfg
		c.Seed = seed
		tr, err := sim.Generate(c)
		if err != nil {
			return nil, err
		}
		tr = sim.AddStorage(tr, *storage)
		if *genOut != "" && seed == seeds[0] {
			if err := trace.Save(*genOut, tr); err != nil {
				return nil, err
			}
		}
		return tr, nil
	}
	opts := sim.DefaultOptions()
	opts.ControlPeriod = *period
	opts.ChangedFraction = *changed
	opts.Context = ctx
	if *sweep && *frontier {
		return usagef("-sweep and -frontier exclude each other")
	}
	if *frontier {
		if !*quiet {
			fmt.Fprintf(env.Stderr, "sim: %d runs per seed for the frontier\n", len(sim.FrontierLossBudgets)+len(sim.FrontierRefreshes))
		}
		points, err := sim.Frontier(traceFor, seeds, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "seeds: %v (means)\n\n", seeds)
		sim.WriteFrontier(env.Stdout, points)
		if *out != "" {
			if err := sim.SaveFrontier(*out, points); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "\nresults: %s/frontier.json\n", *out)
		}
		return nil
	}
	if *sweep {
		tr, err := traceFor(seeds[0])
		if err != nil {
			return err
		}
		if !*quiet {
			fmt.Fprintf(env.Stderr, "sim: sweeping 9 ReclaimNet runs on %s\n", tr.Header.Name)
		}
		points, err := sim.Sweep(tr, opts, seeds[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "trace: %s, seed %d\n\n", tr.Header.Name, seeds[0])
		sim.WriteSweep(env.Stdout, points)
		return nil
	}
	progress := func(key string, seed uint64) {
		if ctx.Err() == nil && !*quiet {
			fmt.Fprintf(env.Stderr, "sim: running %s (seed %d)\n", key, seed)
		}
	}
	rep, err := sim.RunSuite(keys, seeds, traceFor, opts, sim.Tuning{BetaP1: *betaP1, Alpha: *alpha, BetaP3: *betaP3, BambooRefresh: *b1Refresh}, progress)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim interrupted: %w", err)
	}
	rep.WriteTable(env.Stdout)
	if *drift > 0 && loaded == nil {
		c := cfg
		truth := func(t float64) float64 { return c.TrueHazard(time.Duration(t * float64(time.Second))) }
		for _, r := range rep.Rows {
			if r.Key != "reclaimnet" || len(r.PerSeed) == 0 {
				continue
			}
			events := 0.0
			tr, _ := traceFor(seeds[0])
			for _, d := range tr.Departures {
				if d.Type == trace.Emergency && d.T >= cfg.DriftAt.Seconds() {
					events++
				}
			}
			rate := events / (cfg.Duration - cfg.DriftAt).Hours()
			if d := sim.Reconvergence(r.PerSeed[0].HazardSeries, truth, cfg.DriftAt.Seconds(), 2*time.Hour); d >= 0 {
				fmt.Fprintf(env.Stdout, "drift x%.2g at day %.0f: estimate within 10 %% for 2 h from %v after the shift (%.2f emergencies/h cluster-wide; paper: 18 min at its rate)\n", *drift, cfg.DriftAt.Hours()/24, d.Round(time.Minute), rate)
			} else {
				fmt.Fprintf(env.Stdout, "drift x%.2g at day %.0f: estimate never stayed within 10 %% for 2 h (%.2f emergencies/h cluster-wide; paper: 18 min at its rate)\n", *drift, cfg.DriftAt.Hours()/24, rate)
			}
		}
	}
	if *out != "" {
		var truth func(float64) float64
		if loaded == nil {
			c := cfg
			truth = func(t float64) float64 { return c.TrueHazard(time.Duration(t * float64(time.Second))) }
		}
		if err := rep.Save(*out, truth); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "\nresults: %s/results.json\n", *out)
	}
	return nil
}

package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/sim"
	"github.com/reclaimnet/reclaimnet/trace"
)

func init() { register(newSimCmd) }

// simOptions are 'reclaimnet sim's flags.
type simOptions struct {
	tracePath, policies, seeds, out, genOut, importDeps, workload, tracesDir, format string
	ablation, quiet, sweep, frontier, correlated                                     bool
	nodes, storage                                                                   int
	days, drift, changed, betaP1, alpha, betaP3                                      float64
	period, lossBudget, b1Refresh                                                    time.Duration
}

func newSimCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "replay a reclaim trace through ReclaimNet and the baselines",
		Long: `With no flags, generates the calibrated two-month 54-node campus trace (docs/design.md) and
prints a table of work loss, downtime and traffic per policy. --trace replays a trace in the
documented format (trace/README.md) instead; --import builds one from a public departure
trace (microsoft99, bamboo-p3, bamboo-g4dn) with a --workload (generator, alibaba, philly):
the Bamboo traces are built into the binary, the others are read from --traces DIR
(docs/sim.md says where to download each). --gen-out writes the generated or imported trace
so it can be inspected or replayed. --out receives results.json and SVG plots (cumulative
work loss and downtime CDF on log axes, the true and estimated hazard over the day). The
tables print as aligned columns, or in Markdown with --format md. --frontier prints work loss against
checkpoint traffic instead (ReclaimNet at several loss budgets, B1 at several refreshes):
the comparison at equal traffic, and what a tighter loss budget costs the network.`,
		GroupID: groupTools,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	var o simOptions
	fs.StringVar(&o.tracePath, "trace", "", "trace `dir` or file (default: the calibrated generator)")
	fs.StringVar(&o.policies, "policies", strings.Join(sim.PolicyKeys, ","), "comma-separated policies: "+strings.Join(sim.PolicyKeys, ",")+" or ablation subsets "+strings.Join(sim.AblationKeys, ","))
	fs.BoolVar(&o.ablation, "ablation", false, "run the 8 subsets of {P1,P2,P3} instead of --policies")
	fs.StringVar(&o.seeds, "seeds", "1", "comma-separated generator seeds (with --trace: the seeds of random destination choice when P2 is off)")
	fs.StringVar(&o.out, "out", "", "`directory` for results.json and SVG plots")
	fs.StringVar(&o.genOut, "gen-out", "", "also write the generated trace (first seed) to this `directory`")
	fs.IntVar(&o.nodes, "nodes", 54, "generator: number of nodes")
	fs.Float64Var(&o.days, "days", 60, "generator: trace length in days")
	fs.DurationVar(&o.period, "period", 10*time.Minute, "longest gap between two controller runs (it also runs on every event and bandwidth sample)")
	fs.Float64Var(&o.drift, "drift", 0, "generator: multiply the hazard by this `factor` from mid-trace (e.g. 1.7)")
	fs.DurationVar(&o.lossBudget, "loss-budget", 0, "generator: give every job this loss budget (default 5m)")
	fs.BoolVar(&o.correlated, "correlated", false, "generator: add groups of nodes leaving together (building-wide events, lab power-offs, labs closing every evening; docs/sim.md)")
	fs.IntVar(&o.storage, "storage", 0, "add this many storage nodes (machine-room servers that keep checkpoints, host no jobs, never leave) to the generated, imported or replayed trace")
	fs.Float64Var(&o.changed, "changed-fraction", 1, "share of a checkpoint that differs from the job's previous one (what a hand-off to a pre-synced standby still moves), in (0,1]")
	fs.Float64Var(&o.betaP1, "beta-p1", 0, "override the largest share of a job's bandwidth its checkpoints may take (default 0.2)")
	fs.Float64Var(&o.alpha, "alpha", 0, "override the weight of the cost of moving again from a destination that may leave (default 1.0)")
	fs.Float64Var(&o.betaP3, "beta-p3", 0, "override the share of each link reserved for other traffic (default 0.3)")
	fs.DurationVar(&o.b1Refresh, "b1-refresh", 0, "replace B1's 2-min peer refresh (to compare work loss at equal checkpoint traffic; the row is labelled with it)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "no progress output")
	fs.StringVar(&o.format, "format", "text", "how the tables are printed: `text` (aligned columns) or md (Markdown, as in docs/)")
	fs.BoolVar(&o.sweep, "sweep", false, "run ReclaimNet's sensitivity sweep (--beta-p1, --alpha, --beta-p3) instead of the table")
	fs.BoolVar(&o.frontier, "frontier", false, "instead of the table: work loss against checkpoint traffic, ReclaimNet at several loss budgets and B1 at several refreshes (mean over --seeds)")
	fs.StringVar(&o.importDeps, "import", "", "build the trace from a public departure `trace`: microsoft99, bamboo-p3 or bamboo-g4dn")
	fs.StringVar(&o.workload, "workload", "generator", "with --import: generator, alibaba or philly")
	fs.StringVar(&o.tracesDir, "traces", "", "with --import: `directory` of downloaded public traces (docs/sim.md); the Bamboo traces are built in")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runSim(cmd.Context(), env, o) }
	return cmd
}

func runSim(ctx context.Context, env *Env, o simOptions) error {
	if os.Getenv("GOGC") == "" {
		// A run allocates a policy snapshot per control step while its
		// trace stays live: collecting at 3× the live heap instead of 2×
		// takes 6–13 % of the CPU time off a 500-node run, for a peak of
		// 0.7 GB instead of 0.5 (5×: little more, at 1.2 GB).
		defer debug.SetGCPercent(debug.SetGCPercent(200))
	}
	switch o.format {
	case "md":
		return simulate(ctx, env, env.Stdout, o)
	case "text":
		// The tables are written in Markdown and laid out for the terminal.
		var buf bytes.Buffer
		err := simulate(ctx, env, &buf, o)
		if _, werr := io.WriteString(env.Stdout, sim.TextTables(buf.String())); err == nil {
			err = werr
		}
		return err
	}
	return usagef("--format %q: want text or md", o.format)
}

// simulate runs what the flags ask for and writes its report to stdout.
func simulate(ctx context.Context, env *Env, stdout io.Writer, o simOptions) error {
	var seeds []uint64
	for _, s := range strings.Split(o.seeds, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return usagef("bad seed %q", s)
		}
		seeds = append(seeds, v)
	}
	keys := strings.Split(o.policies, ",")
	if o.ablation {
		keys = sim.AblationKeys
	}
	for _, k := range keys {
		if !sim.KnownPolicy(k) {
			return usagef("unknown policy %q (known: %s; ablation: %s)", k, strings.Join(sim.PolicyKeys, ","), strings.Join(sim.AblationKeys, ","))
		}
	}
	if o.nodes < 2 || o.days <= 0 {
		return usagef("--nodes must be ≥ 2 and --days positive")
	}
	cfg := sim.DefaultGenConfig()
	cfg.Nodes = o.nodes
	cfg.Duration = time.Duration(o.days * 24 * float64(time.Hour))
	scale := float64(o.nodes) / 54 * o.days / 60
	cfg.Departures *= scale
	cfg.Jobs = int(float64(cfg.Jobs) * scale)
	cfg.GPUHours *= scale
	if o.drift > 0 {
		cfg.DriftAt, cfg.DriftFactor = cfg.Duration/2, o.drift
	}
	if o.changed <= 0 || o.changed > 1 {
		return usagef("--changed-fraction must be in (0,1], got %v", o.changed)
	}
	if o.lossBudget < 0 {
		return usagef("--loss-budget must not be negative")
	}
	if o.b1Refresh < 0 {
		return usagef("--b1-refresh must not be negative")
	}
	if o.lossBudget > 0 {
		cfg.LossBudgetMin, cfg.LossBudgetMax = o.lossBudget, o.lossBudget
	}
	if o.correlated {
		cfg.Groups = sim.DefaultGroupConfig()
	}
	if o.storage < 0 {
		return usagef("--storage must not be negative")
	}
	var loaded *trace.Trace
	if o.importDeps != "" && o.tracePath != "" {
		return usagef("--import and --trace exclude each other")
	}
	// An imported trace is built per seed (the seed draws its workload and,
	// for sampled departure sets, its machines); the first seed's is built
	// here, so a bad trace fails before any run and --out can save it.
	var importSeed func(seed uint64) (*trace.Trace, error)
	var imported *trace.Trace
	if o.importDeps != "" {
		ic := sim.DefaultImportConfig(o.tracesDir)
		ic.Departures, ic.Workload = o.importDeps, o.workload
		importSeed = func(seed uint64) (*trace.Trace, error) {
			c := ic
			c.Seed = seed
			t, err := sim.Import(c)
			if err != nil {
				return nil, err
			}
			return sim.AddStorage(t, o.storage), nil
		}
		var err error
		if imported, err = importSeed(seeds[0]); err != nil {
			return err
		}
		if o.genOut != "" {
			if err := trace.Save(o.genOut, imported); err != nil {
				return err
			}
		}
	}
	if o.tracePath != "" {
		t, err := trace.Load(o.tracePath)
		if err != nil {
			return err
		}
		loaded = sim.AddStorage(t, o.storage)
	}
	traceFor := func(seed uint64) (*trace.Trace, error) {
		if loaded != nil {
			return loaded, nil
		}
		if importSeed != nil {
			if seed == seeds[0] {
				return imported, nil
			}
			return importSeed(seed)
		}
		c := cfg
		c.Seed = seed
		tr, err := sim.Generate(c)
		if err != nil {
			return nil, err
		}
		tr = sim.AddStorage(tr, o.storage)
		if o.genOut != "" && seed == seeds[0] {
			if err := trace.Save(o.genOut, tr); err != nil {
				return nil, err
			}
		}
		return tr, nil
	}
	opts := sim.DefaultOptions()
	opts.ControlPeriod = o.period
	opts.ChangedFraction = o.changed
	opts.Context = ctx
	if o.sweep && o.frontier {
		return usagef("--sweep and --frontier exclude each other")
	}
	if o.frontier {
		if !o.quiet {
			fmt.Fprintf(env.Stderr, "sim: %d runs per seed for the frontier\n", len(sim.FrontierLossBudgets)+len(sim.FrontierRefreshes))
		}
		points, err := sim.Frontier(traceFor, seeds, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "seeds: %v (means)\n\n", seeds)
		sim.WriteFrontier(stdout, points)
		if o.out != "" {
			if err := sim.SaveFrontier(o.out, points); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "\nresults: %s/frontier.json\n", o.out)
		}
		return nil
	}
	if o.sweep {
		tr, err := traceFor(seeds[0])
		if err != nil {
			return err
		}
		if !o.quiet {
			fmt.Fprintf(env.Stderr, "sim: sweeping 9 ReclaimNet runs on %s\n", tr.Header.Name)
		}
		points, err := sim.Sweep(tr, opts, seeds[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "trace: %s, seed %d\n\n", tr.Header.Name, seeds[0])
		sim.WriteSweep(stdout, points)
		return nil
	}
	progress := func(key string, seed uint64) {
		if ctx.Err() == nil && !o.quiet {
			fmt.Fprintf(env.Stderr, "sim: running %s (seed %d)\n", key, seed)
		}
	}
	rep, err := sim.RunSuite(keys, seeds, traceFor, opts, sim.Tuning{BetaP1: o.betaP1, Alpha: o.alpha, BetaP3: o.betaP3, BambooRefresh: o.b1Refresh}, progress)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim interrupted: %w", err)
	}
	rep.WriteTable(stdout)
	if o.drift > 0 && loaded == nil {
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
				fmt.Fprintf(stdout, "drift x%.2g at day %.0f: estimate within 10 %% for 2 h from %v after the shift (%.2f emergencies/h cluster-wide; paper: 18 min at its rate)\n", o.drift, cfg.DriftAt.Hours()/24, d.Round(time.Minute), rate)
			} else {
				fmt.Fprintf(stdout, "drift x%.2g at day %.0f: estimate never stayed within 10 %% for 2 h (%.2f emergencies/h cluster-wide; paper: 18 min at its rate)\n", o.drift, cfg.DriftAt.Hours()/24, rate)
			}
		}
	}
	if o.out != "" {
		var truth func(float64) float64
		if loaded == nil {
			c := cfg
			truth = func(t float64) float64 { return c.TrueHazard(time.Duration(t * float64(time.Second))) }
		}
		if err := rep.Save(o.out, truth); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nresults: %s/results.json\n", o.out)
	}
	return nil
}

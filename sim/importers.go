package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/trace"
)

// Departure sources and workload sources the importers know; the files
// each one reads are listed in tracefiles.go.
const (
	DeparturesMicrosoft = "microsoft99"
	DeparturesBambooP3  = "bamboo-p3"
	DeparturesBambooG4  = "bamboo-g4dn"
	WorkloadGenerator   = "generator"
	WorkloadAlibaba     = "alibaba"
	WorkloadPhilly      = "philly"
)

// ImportConfig says how to turn public traces into a ReclaimNet trace.
// Every mapping choice is a field here and documented in docs/sim.md.
type ImportConfig struct {
	// TracesDir holds the public traces in the layout of tracefiles.go;
	// files it lacks (or all, when empty) come from the copies embedded
	// in the binary, which are the Bamboo traces.
	TracesDir  string
	Departures string // DeparturesMicrosoft, DeparturesBambooP3, DeparturesBambooG4
	Workload   string // WorkloadGenerator, WorkloadAlibaba, WorkloadPhilly
	Seed       uint64
	// Machines is how many desktops of microsoft99 become nodes (a seeded
	// random sample of the 1,000); the Bamboo traces use every instance.
	Machines int
	// ScheduledFraction of desktop departures get a notice (docs/design.md §0: 42 %
	// of departures are emergencies, so 0.58); Bamboo preemptions get none.
	ScheduledFraction float64
}

// DefaultImportConfig returns the mapping used for the published figures.
func DefaultImportConfig(tracesDir string) ImportConfig {
	return ImportConfig{TracesDir: tracesDir, Departures: DeparturesMicrosoft, Workload: WorkloadGenerator,
		Seed: 1, Machines: 54, ScheduledFraction: 0.58}
}

// interval is one up or down run of one unit of a departure trace.
type interval struct {
	unit       string
	up         bool
	start, end float64
	transition bool // false: censored at the end of the trace
}

// readDepartures opens one departure trace and parses it.
func readDepartures(files traceFiles, name string, parse func(io.Reader, string) ([]interval, error)) ([]interval, error) {
	f, shown, err := files.open(name)
	if err != nil {
		return nil, fmt.Errorf("open departures: %w", err)
	}
	defer f.Close()
	return parse(f, shown)
}

// Import builds a trace from a public departure trace and a workload.
func Import(c ImportConfig) (*trace.Trace, error) {
	files := traceFiles{dir: c.TracesDir}
	var ivs []interval
	var err error
	var name, file string
	switch c.Departures {
	case DeparturesMicrosoft:
		file, name = fileMicrosoft, "microsoft99 desktops"
		ivs, err = readDepartures(files, file, pingIntervals)
	case DeparturesBambooP3:
		file, name = fileBambooP3, "Bamboo AWS p3 spot"
		ivs, err = readDepartures(files, file, bambooIntervals)
	case DeparturesBambooG4:
		file, name = fileBambooG4, "Bamboo AWS g4dn spot"
		ivs, err = readDepartures(files, file, bambooIntervals)
	default:
		return nil, fmt.Errorf("unknown departure source %q (known: %s, %s, %s)", c.Departures, DeparturesMicrosoft, DeparturesBambooP3, DeparturesBambooG4)
	}
	if err != nil {
		return nil, err
	}
	if len(ivs) == 0 {
		return nil, fmt.Errorf("departure trace %s has no intervals", c.Departures)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x1a9047))
	// Units, in first-seen order.
	byUnit := map[string][]interval{}
	var units []string
	dur := 0.0
	for _, iv := range ivs {
		if _, ok := byUnit[iv.unit]; !ok {
			units = append(units, iv.unit)
		}
		byUnit[iv.unit] = append(byUnit[iv.unit], iv)
		dur = max(dur, iv.end)
	}
	if c.Departures == DeparturesMicrosoft && c.Machines > 0 && c.Machines < len(units) {
		rng.Shuffle(len(units), func(a, b int) { units[a], units[b] = units[b], units[a] })
		units = units[:c.Machines]
		sort.Strings(units)
	}
	// Nodes, links and bandwidth come from the generator's campus model.
	g := DefaultGenConfig()
	g.Seed = c.Seed
	g.Nodes = len(units)
	g.Duration = time.Duration(dur * float64(time.Second))
	g.Departures, g.Jobs = 0, 0
	tr, err := Generate(g)
	if err != nil {
		return nil, err
	}
	tr.Departures, tr.Returns, tr.Jobs = nil, nil, nil
	tr.Header.Name = fmt.Sprintf("%s (%d nodes, %.1f days), workload %s", name, len(units), dur/86400, c.Workload)
	tr.Header.Source = "sim.Import of " + file
	hourly := c.Departures == DeparturesMicrosoft
	for i, u := range units {
		runs := byUnit[u]
		sort.Slice(runs, func(a, b int) bool { return runs[a].start < runs[b].start })
		node := tr.Nodes[i].ID
		if len(runs) > 0 && (!runs[0].up || runs[0].start > 0) {
			tr.Nodes[i].Absent = true
		}
		// The desktop trace is hourly: a change seen at hour H happened
		// at a seeded random second of the hour before it.
		shift := func(t float64) float64 {
			if !hourly || t == 0 {
				return t
			}
			return max(0, t-math.Floor(rng.Float64()*3600))
		}
		last := -math.MaxFloat64
		for _, iv := range runs {
			if !iv.up {
				continue
			}
			if iv.start > 0 {
				t := max(shift(iv.start), last+60)
				tr.Returns = append(tr.Returns, trace.ReturnRec{T: t, Node: node})
				last = t
			}
			if iv.transition && iv.end < dur {
				t := max(shift(iv.end), last+60)
				d := trace.DepartureRec{T: t, Node: node, Type: trace.Emergency}
				if c.Departures == DeparturesMicrosoft && rng.Float64() < c.ScheduledFraction {
					d.Type = trace.Scheduled
					d.NoticeS = math.Round(min(3600, max(10, 120*math.Exp(rng.NormFloat64()))))
					// The notice cannot start before the node came up.
					d.NoticeS = max(1, min(d.NoticeS, math.Floor(t-max(0, last))))
				}
				tr.Departures = append(tr.Departures, d)
				last = t
			}
		}
	}
	sort.SliceStable(tr.Departures, func(a, b int) bool { return tr.Departures[a].T < tr.Departures[b].T })
	sort.SliceStable(tr.Returns, func(a, b int) bool { return tr.Returns[a].T < tr.Returns[b].T })
	// Workload, at the generator's density (312 jobs and 4,890 GPU-h per
	// 54 nodes and 60 days), scaled to this trace's nodes and length.
	scale := float64(len(units)) / 54 * dur / (60 * 86400)
	jobs := max(1, int(math.Round(312*scale)))
	switch c.Workload {
	case WorkloadGenerator, "":
		g.Jobs, g.GPUHours = jobs, 4890*scale
		genJobs(g, rng, tr, nodeKinds(tr))
	case WorkloadAlibaba:
		if err := alibabaJobs(files, rng, tr, jobs); err != nil {
			return nil, err
		}
	case WorkloadPhilly:
		if err := phillyJobs(files, rng, tr, jobs); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown workload %q (known: %s, %s, %s)", c.Workload, WorkloadGenerator, WorkloadAlibaba, WorkloadPhilly)
	}
	return tr, nil
}

func nodeKinds(tr *trace.Trace) []gpuKind {
	out := make([]gpuKind, len(tr.Nodes))
	for i, n := range tr.Nodes {
		out[i] = gpuKind{model: n.GPUModel, gpus: n.GPUs, vramGB: n.VRAMGB, capability: n.Capability}
	}
	return out
}

// jobShape draws the parts of a job the workload traces do not have:
// checkpoint size (log-normal, median 3.2 GB, 120 MB..48 GB), restart time
// and loss budget, as the generator does.
func jobShape(rng *rand.Rand, j *trace.JobRec) {
	j.CheckpointMB = math.Round(min(48000, max(120, 3200*math.Exp(1.1*rng.NormFloat64()))))
	j.RestartS = math.Round(30 + 90*rng.Float64())
	j.LossBudgetS = math.Round(900 + 2700*rng.Float64())
	j.Capability = 7.0
	j.VRAMGB = 16
	if j.GPUs >= 2 {
		j.VRAMGB = 40
	}
}

// alibabaJobs samples jobs from the Alibaba GPU v2023 pod list: pods that
// ask for at least one GPU and ran (deletion after scheduling). GPUs are
// num_gpu (a fractional gpu_milli share counts as one GPU), capped at 4,
// the largest node; runtime is deletion − scheduled, capped at the trace
// length; submit times keep the pods' order, rescaled into the first 92 %
// of the trace.
func alibabaJobs(files traceFiles, rng *rand.Rand, tr *trace.Trace, n int) error {
	f, path, err := files.open(fileAlibaba)
	if err != nil {
		return fmt.Errorf("open workload: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	type pod struct {
		created, runtime float64
		gpus             int
	}
	var pods []pod
	col := map[string]int{}
	for line := 1; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return &trace.ParseError{File: path, Line: line, Err: err}
		}
		if line == 1 {
			for i, h := range rec {
				col[h] = i
			}
			for _, need := range []string{"num_gpu", "creation_time", "deletion_time", "scheduled_time"} {
				if _, ok := col[need]; !ok {
					return &trace.ParseError{File: path, Line: 1, Err: fmt.Errorf("missing column %q", need)}
				}
			}
			continue
		}
		if strings.TrimSpace(rec[col["scheduled_time"]]) == "" || strings.TrimSpace(rec[col["deletion_time"]]) == "" {
			continue // never scheduled, or still running at the end of the trace
		}
		num := func(name string) (float64, error) {
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[col[name]]), 64)
			if err != nil {
				return 0, &trace.ParseError{File: path, Line: line, Err: fmt.Errorf("column %s: %w", name, err)}
			}
			return v, nil
		}
		g, err := num("num_gpu")
		if err != nil {
			return err
		}
		cr, err := num("creation_time")
		if err != nil {
			return err
		}
		del, err := num("deletion_time")
		if err != nil {
			return err
		}
		sch, err := num("scheduled_time")
		if err != nil {
			return err
		}
		if g < 1 || del <= sch {
			continue
		}
		pods = append(pods, pod{created: cr, runtime: del - sch, gpus: min(4, int(g))})
	}
	if len(pods) == 0 {
		return fmt.Errorf("%s: no GPU pods", path)
	}
	picked := make([]pod, n)
	for i := range picked {
		picked[i] = pods[rng.IntN(len(pods))]
	}
	sort.SliceStable(picked, func(a, b int) bool { return picked[a].created < picked[b].created })
	lo, hi := picked[0].created, picked[len(picked)-1].created
	dur := tr.Header.DurationS
	for i, p := range picked {
		t := 0.0
		if hi > lo {
			t = (p.created - lo) / (hi - lo) * dur * 0.92
		}
		j := trace.JobRec{T: math.Round(t), ID: fmt.Sprintf("a%04d", i+1), GPUs: p.gpus}
		run := max(600, min(p.runtime, dur))
		j.WorkGPUh = math.Round(run/3600*float64(p.gpus)*1000) / 1000
		jobShape(rng, &j)
		tr.Jobs = append(tr.Jobs, j)
	}
	return nil
}

// phillyJobs draws job runtimes from the Philly runtime list (runtimes of
// at least 10 min, capped at the trace length); the list has nothing else,
// so GPUs, submit times and checkpoints follow the generator.
func phillyJobs(files traceFiles, rng *rand.Rand, tr *trace.Trace, n int) error {
	f, path, err := files.open(filePhilly)
	if err != nil {
		return fmt.Errorf("open workload: %w", err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	var runtimes []float64
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if i == 0 {
			if l != "runtime" {
				return &trace.ParseError{File: path, Line: 1, Err: fmt.Errorf("header %q, want runtime", l)}
			}
			continue
		}
		if l == "" {
			continue
		}
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			return &trace.ParseError{File: path, Line: i + 1, Err: err}
		}
		if v >= 600 {
			runtimes = append(runtimes, v)
		}
	}
	if len(runtimes) == 0 {
		return fmt.Errorf("%s: no runtimes of 10 min or more", path)
	}
	dur := tr.Header.DurationS
	for i := 0; i < n; i++ {
		g := 1
		switch u := rng.Float64(); {
		case u < 0.15:
			g = 4
		case u < 0.45:
			g = 2
		}
		run := min(runtimes[rng.IntN(len(runtimes))], dur)
		j := trace.JobRec{T: math.Round(rng.Float64() * dur * 0.92), GPUs: g, WorkGPUh: math.Round(run/3600*float64(g)*1000) / 1000}
		jobShape(rng, &j)
		tr.Jobs = append(tr.Jobs, j)
	}
	sort.SliceStable(tr.Jobs, func(a, b int) bool { return tr.Jobs[a].T < tr.Jobs[b].T })
	for i := range tr.Jobs {
		tr.Jobs[i].ID = fmt.Sprintf("p%04d", i+1)
	}
	return nil
}

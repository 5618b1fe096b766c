package sim

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/trace"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden transcripts in testdata")

// shortConfig is a small calibrated campus for fast tests: the paper's
// densities on 54 nodes over 10 days.
func shortConfig(seed uint64) GenConfig {
	c := DefaultGenConfig()
	c.Seed = seed
	c.Duration = 10 * 24 * time.Hour
	scale := 10.0 / 60
	c.Departures *= scale
	c.Jobs = int(float64(c.Jobs) * scale)
	c.GPUHours *= scale
	return c
}

func TestTraceRoundTrip(t *testing.T) {
	c := shortConfig(3)
	c.Duration = 2 * 24 * time.Hour
	tr, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := trace.Save(dir, tr); err != nil {
		t.Fatal(err)
	}
	back, err := trace.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(tr)
	b, _ := json.Marshal(back)
	// Kinds are filled on write; compare after normalising them.
	norm := func(x []byte) string {
		var v trace.Trace
		_ = json.Unmarshal(x, &v)
		v.Header.Kind = ""
		for i := range v.Nodes {
			v.Nodes[i].Kind = ""
		}
		for i := range v.Links {
			v.Links[i].Kind = ""
		}
		for i := range v.Departures {
			v.Departures[i].Kind = ""
		}
		for i := range v.Returns {
			v.Returns[i].Kind = ""
		}
		for i := range v.Bandwidth {
			v.Bandwidth[i].Kind = ""
		}
		for i := range v.Jobs {
			v.Jobs[i].Kind = ""
		}
		out, _ := json.Marshal(v)
		return string(out)
	}
	if norm(a) != norm(b) {
		t.Fatalf("trace changed in a write/read round trip")
	}
}

func TestGeneratorCalibration(t *testing.T) {
	c := DefaultGenConfig()
	tr, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(tr.Nodes); got != 54 {
		t.Errorf("nodes: got %d, want 54", got)
	}
	buildings := map[string]bool{}
	for _, n := range tr.Nodes {
		buildings[n.Building] = true
	}
	if len(buildings) != 4 {
		t.Errorf("buildings: got %d, want 4", len(buildings))
	}
	em, peak, off := 0, 0, 0
	for _, d := range tr.Departures {
		if d.Type == trace.Emergency {
			em++
			h := timeOfDay(tr.Header.Start.Add(secs(d.T))).Hours()
			switch {
			case (h >= 11.5 && h < 13) || (h >= 17.5 && h < 20):
				peak++
			case h < 8 || h >= 20:
				off++
			}
		} else if d.NoticeS < 10 {
			t.Errorf("notice %g s below 10 s", d.NoticeS)
		}
	}
	n := len(tr.Departures)
	if n < 700 || n > 1000 {
		t.Errorf("departures: got %d, want about 847", n)
	}
	if f := float64(em) / float64(n); f < 0.36 || f > 0.48 {
		t.Errorf("emergency fraction: got %.2f, want about 0.42", f)
	}
	// Per hour: 4 peak hours, 12 off-peak hours a day.
	if ratio := (float64(peak) / 4) / (float64(off) / 12); ratio < 4 || ratio > 8.5 {
		t.Errorf("peak/off-peak emergency rate: got %.1f, want about 6", ratio)
	}
	if len(tr.Jobs) != 312 {
		t.Errorf("jobs: got %d, want 312", len(tr.Jobs))
	}
	gpuh := 0.0
	var ck []float64
	for _, j := range tr.Jobs {
		gpuh += j.WorkGPUh
		ck = append(ck, j.CheckpointMB)
	}
	if math.Abs(gpuh-4890) > 5 {
		t.Errorf("GPU-hours: got %.0f, want 4890", gpuh)
	}
	sort.Float64s(ck)
	if med := ck[len(ck)/2]; med < 2500 || med > 4000 {
		t.Errorf("median checkpoint: got %.0f MB, want about 3200", med)
	}
	if ck[0] < 120 || ck[len(ck)-1] > 48000 {
		t.Errorf("checkpoint range: got %.0f..%.0f MB, want within 120..48000", ck[0], ck[len(ck)-1])
	}
	lam, same, cross := traceMeans(tr)
	if s := same * 8 / 1e6; s < 740 || s > 900 {
		t.Errorf("same-building bandwidth: got %.0f Mbit/s, want about 820", s)
	}
	if x := cross * 8 / 1e6; x < 215 || x > 265 {
		t.Errorf("cross-building bandwidth: got %.0f Mbit/s, want about 240", x)
	}
	if lam <= 0 {
		t.Errorf("emergency hazard: got %g, want positive", lam)
	}
	// corr(true hazard, bandwidth) over the uplink samples.
	var hs, bs []float64
	for _, b := range tr.Bandwidth {
		if strings.HasPrefix(b.Link, "up-") {
			hs = append(hs, c.TrueHazard(secs(b.T)))
			bs = append(bs, b.AvailableMbs)
		}
	}
	if r := corr(hs, bs); r < -0.6 || r > -0.25 {
		t.Errorf("corr(hazard, bandwidth): got %.2f, want about -0.43", r)
	}
}

func corr(x, y []float64) float64 {
	mx, my := 0.0, 0.0
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= float64(len(x))
	my /= float64(len(y))
	var sxy, sxx, syy float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
		syy += (y[i] - my) * (y[i] - my)
	}
	return sxy / math.Sqrt(sxx*syy)
}

func TestSameSeedSameOutput(t *testing.T) {
	keys := []string{"b1p", "b1", "b6", "reclaimnet"}
	run := func() string {
		rep, err := RunSuite(keys, []uint64{7}, func(seed uint64) (*trace.Trace, error) {
			c := shortConfig(seed)
			c.Duration = 3 * 24 * time.Hour
			return Generate(c)
		}, DefaultOptions(), Tuning{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		rep.WriteTable(&b)
		for i := range rep.Rows { // wall-clock time is the one field allowed to differ
			rep.Rows[i].Mean.WallS = 0
			for k := range rep.Rows[i].PerSeed {
				rep.Rows[i].PerSeed[k].WallS = 0
			}
		}
		js, _ := json.Marshal(rep)
		return b.String() + string(js)
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("two runs with seed 7 differ:\n%s\n---\n%s", a, b)
	}
	c := shortConfig(8)
	c.Duration = 3 * 24 * time.Hour
	if tr7, _ := Generate(func() GenConfig { x := c; x.Seed = 7; return x }()); tr7 != nil {
		tr8, _ := Generate(c)
		if len(tr7.Departures) == len(tr8.Departures) && tr7.Departures[0] == tr8.Departures[0] {
			t.Fatalf("seeds 7 and 8 gave the same departures; the seed is ignored")
		}
	}
}

// TestBoundsOverSeeds: over several seeds of the short calibrated trace the
// hindsight oracle loses no more than any policy, and every policy that
// checkpoints loses less than no migration. The further bound,
// ReclaimNet below every online baseline, does NOT hold in this model, so
// the test logs those comparisons instead of asserting them. Why (see
// BENCHMARKS.md): with the paper's 5-min loss budgets P1.5's ceiling pins
// ReclaimNet at Slurm's 10-min interval (the hazard optimum is hours at
// the the design's event counts) and its floor C/(β·b) makes large checkpoints
// less frequent than Slurm's unthrottled uploads; only ~15 emergencies per
// seed hit a job, so the ReclaimNet-vs-Slurm order flips between seeds;
// and the Bamboo-like model loses little work by design (it pays in
// redundant computation, not in work loss).
func TestBoundsOverSeeds(t *testing.T) {
	keys := []string{"b1p", "b2", "b1", "b3", "b4", "b5", "b7", "reclaimnet", "b6"}
	for _, seed := range []uint64{1, 2, 3} {
		tr, err := Generate(shortConfig(seed))
		if err != nil {
			t.Fatal(err)
		}
		loss := map[string]float64{}
		for _, k := range keys {
			r, err := RunPolicy(tr, k, DefaultOptions(), seed, Tuning{})
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, k, err)
			}
			loss[k] = r.WorkLossGPUh
		}
		for _, k := range keys {
			if loss["b6"] > loss[k]+1e-9 {
				t.Errorf("seed %d: oracle lost %.3f GPU-h, more than %s's %.3f", seed, loss["b6"], k, loss[k])
			}
			if k != "b2" && k != "b6" && loss[k] >= loss["b2"] {
				t.Errorf("seed %d: %s lost %.3f GPU-h, not less than no migration's %.3f", seed, k, loss[k], loss["b2"])
			}
		}
		t.Logf("seed %d work loss GPU-h: %v", seed, loss)
		for _, k := range []string{"b1p", "b1", "b3", "b4", "b5", "b7"} {
			if loss["reclaimnet"] >= loss[k] {
				t.Logf("seed %d: ReclaimNet %.3f GPU-h is not below %s's %.3f (logged, not asserted; see above)", seed, loss["reclaimnet"], k, loss[k])
			}
		}
	}
}

// TestGoldenTranscripts replays the hand-written traces in testdata and
// compares the printed table with the golden file (-rewrite updates it).
func TestGoldenTranscripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.jsonl")
	if len(files) == 0 {
		t.Fatal("no traces in testdata")
	}
	keys := []string{"b1p", "b2", "b1", "b6", "reclaimnet"}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			tr, err := trace.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := RunSuite(keys, []uint64{1}, func(uint64) (*trace.Trace, error) { return tr, nil }, DefaultOptions(), Tuning{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var oracle float64
			for _, r := range rep.Rows {
				if r.Key == "b6" {
					oracle = r.Mean.WorkLossGPUh
				}
			}
			for _, r := range rep.Rows {
				if r.Mean.WorkLossGPUh < oracle-1e-9 {
					t.Errorf("%s lost %.3f GPU-h, less than the oracle's %.3f", r.Name, r.Mean.WorkLossGPUh, oracle)
				}
			}
			var b bytes.Buffer
			rep.WriteTable(&b)
			golden := strings.TrimSuffix(f, ".jsonl") + ".golden"
			if *rewrite {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./sim -run Golden -rewrite)", err)
			}
			if b.String() != string(want) {
				t.Fatalf("transcript of %s changed:\ngot:\n%s\nwant:\n%s", f, b.String(), want)
			}
		})
	}
}

// TestEmergencyLossIsSinceLastCheckpoint checks the engine's accounting on
// the two-node trace by hand: Slurm checkpoints every 10 min to storage;
// the host dies at 3000 s, so the job loses the work since its last
// committed checkpoint.
func TestEmergencyLossIsSinceLastCheckpoint(t *testing.T) {
	tr, err := trace.Load("testdata/two_nodes.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	r, err := RunPolicy(tr, "b1p", DefaultOptions(), 1, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	// Start at 0 + 60 s restart; checkpoints start at 660, 1260+δ, ...
	// each takes 3.2 GB / 30 MB/s (240 Mbit/s uplink) ≈ 107 s. The last
	// committed capture before 3000 s is at most 600 + 107 s old, at
	// least the time since the last completed capture.
	lossS := r.WorkLossGPUh * 3600
	if lossS <= 0 || lossS > 600+110+1 {
		t.Fatalf("lost %.0f s of work, want in (0, 711]", lossS)
	}
	if r.Interruptions != 1 {
		t.Fatalf("interruptions: got %d, want 1", r.Interruptions)
	}
	nm, _ := RunPolicy(tr, "b2", DefaultOptions(), 1, Tuning{})
	if want := 3000.0 - 60; math.Abs(nm.WorkLossGPUh*3600-want) > 1 {
		t.Fatalf("no migration lost %.0f s, want %.0f (everything since the start)", nm.WorkLossGPUh*3600, want)
	}
}

func TestProgressiveFillIsMaxMinFair(t *testing.T) {
	// Two links of 10 and 4; flow A crosses both, B only the first,
	// C only the second with demand 1.
	a := &fillFlow{links: []int{0, 1}, weight: 1, demand: math.Inf(1)}
	b := &fillFlow{links: []int{0}, weight: 1, demand: math.Inf(1)}
	c := &fillFlow{links: []int{1}, weight: 1, demand: 1}
	new(filler).fill([]*fillFlow{a, b, c}, []float64{10, 4})
	// C gets its demand 1, A the rest of link 1 (3), B the rest of link 0 (7).
	for _, tc := range []struct {
		name      string
		got, want float64
	}{{"A", a.rate, 3}, {"B", b.rate, 7}, {"C", c.rate, 1}} {
		if math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("flow %s: got %g, want %g", tc.name, tc.got, tc.want)
		}
	}
}

// TestFillerReusedMatchesFresh: a filler that keeps its scratch space
// from call to call gives every flow set the rates a fresh one gives.
func TestFillerReusedMatchesFresh(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	capacity := []float64{10, 4, 7, 1, 12, 3, 9, 5}
	flowSet := func() []*fillFlow {
		var fs []*fillFlow
		for range rng.IntN(6) {
			f := &fillFlow{weight: float64(rng.IntN(3)), demand: math.Inf(1)}
			if rng.IntN(2) == 0 {
				f.demand = 6 * rng.Float64()
			}
			for l := range capacity {
				if rng.IntN(3) == 0 {
					f.links = append(f.links, l)
				}
			}
			fs = append(fs, f)
		}
		return fs
	}
	var reused filler
	for round := range 500 {
		fs := flowSet()
		reused.fill(fs, capacity)
		got := make([]float64, len(fs))
		for i, f := range fs {
			got[i] = f.rate
		}
		new(filler).fill(fs, capacity)
		for i, f := range fs {
			if got[i] != f.rate {
				t.Fatalf("round %d, flow %d (links %v, weight %g, demand %g): reused filler %g, fresh %g", round, i, f.links, f.weight, f.demand, got[i], f.rate)
			}
		}
	}
}

func TestStaticIntervalFollowsAppendixC(t *testing.T) {
	tr, err := Generate(shortConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	lam, same, cross := traceMeans(tr)
	c := float64(medianCheckpoint(tr))
	want := math.Sqrt(2 * c / (lam * (same + cross) / 2))
	if got := StaticInterval(tr).Seconds(); math.Abs(got-want) > 1 {
		t.Fatalf("static interval: got %.0f s, want %.0f s", got, want)
	}
}

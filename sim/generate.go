package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/reclaimnet/reclaimnet/trace"
)

// GenConfig calibrates the generator. DefaultGenConfig is docs/design.md §0 and the
// paper's deployment: 54 nodes in 4 buildings, two months, 847
// departures (42 % emergencies), 312 jobs, 4,890 GPU-hours.
type GenConfig struct {
	Seed      uint64
	Nodes     int           // GPU nodes (the paper's mix is scaled to this)
	Buildings int           // buildings, nodes spread round-robin
	Duration  time.Duration // trace length
	// Departures is the expected number of departures over the trace,
	// EmergencyFraction the share without notice.
	Departures        float64
	EmergencyFraction float64
	// PeakRatio is the lunch/evening emergency hazard over off-peak.
	PeakRatio float64
	// MeanAbsence is the mean time a departed node stays away.
	MeanAbsence time.Duration
	Jobs        int
	GPUHours    float64
	// SameBuildingMbs and CrossBuildingMbs are the mean bandwidth
	// available to migration inside a building and across buildings.
	SameBuildingMbs, CrossBuildingMbs float64
	// Fluctuation is the largest relative swing of a bandwidth sample
	// (±), SampleEvery how often each link is sampled.
	Fluctuation float64
	SampleEvery time.Duration
	// HazardBandwidthCoupling sets how strongly bandwidth drops when the
	// hazard is high (tuned so corr(λe, B) ≈ −0.43).
	HazardBandwidthCoupling float64
	// DriftAt, when positive, multiplies every hazard by DriftFactor from
	// that offset on (the drift scenario).
	DriftAt     time.Duration
	DriftFactor float64
	Start       time.Time
	// LossBudgetMin and LossBudgetMax bound the jobs' loss budgets Lmax
	// (uniform between them). Default 5 min for every job: the paper's
	// Δ* ≈ 10 min (docs/design.md P1 reference numbers) is an expected loss of Δ/2 =
	// 5 min per emergency, the same as Slurm's 10-min DMTCP schedule, so a
	// campus moving from Slurm keeps the loss it tolerated; P1.5's ceiling
	// 2·Lmax is then 10 min.
	LossBudgetMin, LossBudgetMax time.Duration
	// Groups adds departures of groups of nodes (the correlated-departure
	// mode); the zero value adds none.
	Groups GroupConfig
}

// DefaultGenConfig returns the calibrated two-month, 54-node campus.
func DefaultGenConfig() GenConfig {
	return GenConfig{
		Seed:                    1,
		Nodes:                   54,
		Buildings:               4,
		Duration:                60 * 24 * time.Hour,
		Departures:              847,
		EmergencyFraction:       0.42,
		PeakRatio:               6,
		MeanAbsence:             3 * time.Hour,
		Jobs:                    312,
		GPUHours:                4890,
		SameBuildingMbs:         820,
		CrossBuildingMbs:        240,
		Fluctuation:             0.6,
		SampleEvery:             10 * time.Minute,
		HazardBandwidthCoupling: 0.6,
		Start:                   time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC),
		LossBudgetMin:           5 * time.Minute,
		LossBudgetMax:           5 * time.Minute,
	}
}

// Validate reports a configuration the generator cannot honour.
func (c GenConfig) Validate() error {
	switch {
	case c.Nodes < 2:
		return fmt.Errorf("generator: need at least 2 nodes, got %d", c.Nodes)
	case c.Buildings < 1 || c.Buildings > c.Nodes:
		return fmt.Errorf("generator: buildings %d out of range 1..%d", c.Buildings, c.Nodes)
	case c.Duration <= 0:
		return fmt.Errorf("generator: duration must be positive")
	case c.EmergencyFraction < 0 || c.EmergencyFraction > 1:
		return fmt.Errorf("generator: emergency fraction %g outside [0,1]", c.EmergencyFraction)
	case c.PeakRatio < 1:
		return fmt.Errorf("generator: peak ratio %g below 1", c.PeakRatio)
	case c.SampleEvery <= 0:
		return fmt.Errorf("generator: sample period must be positive")
	case c.LossBudgetMin < 0 || c.LossBudgetMax < c.LossBudgetMin:
		return fmt.Errorf("generator: loss budget range %v..%v is invalid", c.LossBudgetMin, c.LossBudgetMax)
	}
	return c.Groups.validate()
}

// DiurnalShape is the generator's time-of-day emergency hazard shape,
// relative to off-peak (1): peak at lunch 11:30–13:00 and in the evening
// 17:30–20:00, a moderate working day 08:00–18:00 otherwise.
func DiurnalShape(tod time.Duration, peak float64) float64 {
	h := tod.Hours()
	switch {
	case h >= 11.5 && h < 13:
		return peak
	case h >= 17.5 && h < 20:
		return peak
	case h >= 8 && h < 18:
		return 1 + (peak-1)/3
	}
	return 1
}

// meanShape is the day-average of DiurnalShape.
func meanShape(peak float64) float64 {
	// 4 h at peak, 8 h at the working-day level, 12 h off-peak.
	return (4*peak + 8*(1+(peak-1)/3) + 12) / 24
}

// TrueHazard is the generator's emergency hazard per node (1/s) at offset
// t for the configuration, the quantity the estimator is compared to.
func (c GenConfig) TrueHazard(t time.Duration) float64 {
	base := c.emergencyBase()
	tod := timeOfDay(c.Start.Add(t))
	h := base * DiurnalShape(tod, c.PeakRatio)
	if c.DriftAt > 0 && t >= c.DriftAt && c.DriftFactor > 0 {
		h *= c.DriftFactor
	}
	return h
}

// emergencyBase is the off-peak emergency hazard per node (1/s) so that
// the expected emergency count matches the configuration, corrected for
// the time nodes spend away.
func (c GenConfig) emergencyBase() float64 {
	perNode := c.Departures / float64(c.Nodes) / c.Duration.Seconds()
	away := perNode * c.MeanAbsence.Seconds()
	return c.EmergencyFraction * perNode / (1 - min(away, 0.5)) / meanShape(c.PeakRatio)
}

// gpuKind is one row of the paper's GPU mix (§IV: 20 RTX 3090, 15 RTX 4090,
// 8 A100 with 4 GPUs, 10 A6000 with 2 GPUs).
type gpuKind struct {
	model      string
	count      int
	gpus       int
	vramGB     float64
	capability float64
}

var paperMix = []gpuKind{
	{"RTX3090", 21, 1, 24, 8.6}, // 20 in the paper + the coordinator machine
	{"RTX4090", 15, 1, 24, 8.9},
	{"A100-80GB", 8, 4, 80, 8.0},
	{"A6000", 10, 2, 48, 8.6},
}

// Generate builds a calibrated synthetic trace.
func Generate(c GenConfig) (*trace.Trace, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	dur := c.Duration.Seconds()
	tr := &trace.Trace{Header: trace.Header{
		Format: trace.Format, Start: c.Start, DurationS: dur,
		Name:   fmt.Sprintf("generated seed=%d nodes=%d", c.Seed, c.Nodes),
		Source: "sim.Generate, calibrated to docs/design.md §0",
	}}
	// Nodes: the paper's mix scaled to c.Nodes, spread over buildings.
	total := 0
	for _, k := range paperMix {
		total += k.count
	}
	var kinds []gpuKind
	for i := 0; i < c.Nodes; i++ {
		// Pick kind by position so the mix holds at any size.
		pos := (i*total)/c.Nodes + 0
		acc := 0
		for _, k := range paperMix {
			acc += k.count
			if pos < acc {
				kinds = append(kinds, k)
				break
			}
		}
	}
	rng.Shuffle(len(kinds), func(a, b int) { kinds[a], kinds[b] = kinds[b], kinds[a] })
	for b := 0; b < c.Buildings; b++ {
		bid := fmt.Sprintf("b%d", b+1)
		tr.Links = append(tr.Links, trace.LinkRec{ID: "up-" + bid, A: "sw-" + bid, B: "core", CapacityMbs: 1000})
	}
	for i, k := range kinds {
		id := fmt.Sprintf("n%03d", i+1)
		bid := fmt.Sprintf("b%d", i%c.Buildings+1)
		tr.Nodes = append(tr.Nodes, trace.NodeRec{ID: id, Building: bid, GPUModel: k.model, GPUs: k.gpus,
			VRAMGB: k.vramGB, Capability: k.capability, AccessLink: "acc-" + id})
	}
	// Links must come after nodes in the file; trace.Write writes nodes
	// first, so order inside the slice is free.
	for _, n := range tr.Nodes {
		tr.Links = append(tr.Links, trace.LinkRec{ID: n.AccessLink, A: n.ID, B: "sw-" + n.Building, CapacityMbs: 1000})
	}
	c.Groups.assignLabs(tr)
	if c.Groups.on() {
		tr.Header.Name += " correlated"
	}
	genDepartures(c, rng, tr, c.Groups.groupDepartures(c, tr))
	genBandwidth(c, rng, tr)
	genJobs(c, rng, tr, kinds)
	tr.Header.Version = trace.Needed(tr)
	return tr, nil
}

// scheduledShape is the time-of-day shape of scheduled (announced)
// reclaims: owners plan them in working hours.
func scheduledShape(tod time.Duration) float64 {
	h := tod.Hours()
	if h >= 8 && h < 20 {
		return 3
	}
	return 1
}

// genDepartures draws each node's independent departures (a
// non-homogeneous Poisson process by thinning, away an exponential time
// after each) and merges the groups' departures into them: a group
// departure while the node is up comes first, one while it is away is
// dropped.
func genDepartures(c GenConfig, rng *rand.Rand, tr *trace.Trace, forced map[string][]forcedDeparture) {
	dur := c.Duration.Seconds()
	perNode := c.Departures / float64(c.Nodes) / dur
	away := min(perNode*c.MeanAbsence.Seconds(), 0.5)
	schedBase := (1 - c.EmergencyFraction) * perNode / (1 - away) / ((12*3 + 12) / 24.0)
	emMax := c.emergencyBase() * c.PeakRatio
	if c.DriftFactor > 1 {
		emMax *= c.DriftFactor
	}
	maxRate := emMax + schedBase*3
	for _, n := range tr.Nodes {
		fs, k := forced[n.ID], 0
		t, upFrom := 0.0, 0.0
		for {
			// Thinning of a non-homogeneous Poisson process.
			t += rng.ExpFloat64() / maxRate
			for k < len(fs) && fs[k].t < upFrom {
				k++ // the node was away
			}
			if k < len(fs) && fs[k].t <= t && fs[k].t < dur {
				f := fs[k]
				k++
				d := trace.DepartureRec{T: f.t, Node: n.ID, Type: trace.Emergency}
				if f.notice > 0 && f.notice <= f.t {
					d.Type, d.NoticeS = trace.Scheduled, f.notice
				}
				tr.Departures = append(tr.Departures, d)
				if f.back < dur {
					tr.Returns = append(tr.Returns, trace.ReturnRec{T: f.back, Node: n.ID})
				}
				t, upFrom = f.back, f.back
				continue
			}
			if t >= dur {
				break
			}
			off := time.Duration(t * float64(time.Second))
			tod := timeOfDay(c.Start.Add(off))
			em := c.TrueHazard(off)
			sc := schedBase * scheduledShape(tod)
			u := rng.Float64() * maxRate
			if u >= em+sc {
				continue
			}
			d := trace.DepartureRec{T: t, Node: n.ID, Type: trace.Emergency}
			if u >= em {
				d.Type = trace.Scheduled
				// Notice: log-normal, median 2 min, clipped to [10 s, 1 h].
				d.NoticeS = math.Round(min(3600, max(10, 120*math.Exp(1.0*rng.NormFloat64()))))
				if d.NoticeS > t {
					continue
				}
			}
			tr.Departures = append(tr.Departures, d)
			// Away for an exponential time, at least 10 min.
			back := t + max(600, rng.ExpFloat64()*c.MeanAbsence.Seconds())
			if back < dur {
				tr.Returns = append(tr.Returns, trace.ReturnRec{T: back, Node: n.ID})
			}
			t, upFrom = back, back
		}
	}
	sort.SliceStable(tr.Departures, func(a, b int) bool { return tr.Departures[a].T < tr.Departures[b].T })
	sort.SliceStable(tr.Returns, func(a, b int) bool { return tr.Returns[a].T < tr.Returns[b].T })
}

func genBandwidth(c GenConfig, rng *rand.Rand, tr *trace.Trace) {
	dur := c.Duration.Seconds()
	step := c.SampleEvery.Seconds()
	mean := meanShape(c.PeakRatio)
	if n := int(math.Ceil(dur/step)) * len(tr.Links); n > 0 {
		tr.Bandwidth = append(make([]trace.BandwidthRec, 0, len(tr.Bandwidth)+n), tr.Bandwidth...)
	}
	for t := 0.0; t < dur; t += step {
		off := time.Duration(t * float64(time.Second))
		tod := timeOfDay(c.Start.Add(off))
		// Standardised hazard level: 0 at the day mean, positive at peaks.
		z := (DiurnalShape(tod, c.PeakRatio) - mean) / mean
		for _, l := range tr.Links {
			m := c.SameBuildingMbs
			if l.B == "core" {
				m = c.CrossBuildingMbs
			}
			f := 1 - c.HazardBandwidthCoupling*0.25*z + 0.3*rng.NormFloat64()
			f = max(1-c.Fluctuation, min(1+c.Fluctuation, f))
			v := min(l.CapacityMbs, m*f)
			tr.Bandwidth = append(tr.Bandwidth, trace.BandwidthRec{T: t, Link: l.ID, AvailableMbs: math.Round(v*10) / 10})
		}
	}
}

func genJobs(c GenConfig, rng *rand.Rand, tr *trace.Trace, kinds []gpuKind) {
	if c.Jobs <= 0 {
		return
	}
	dur := c.Duration.Seconds()
	maxGPUs := 0
	for _, k := range kinds {
		maxGPUs = max(maxGPUs, k.gpus)
	}
	jobs := make([]trace.JobRec, c.Jobs)
	sumWork := 0.0
	for i := range jobs {
		g := 1
		switch u := rng.Float64(); {
		case u < 0.15 && maxGPUs >= 4:
			g = 4
		case u < 0.45 && maxGPUs >= 2:
			g = 2
		}
		vram := 16.0
		if g >= 2 {
			vram = 40
		}
		if rng.Float64() < 0.5 {
			vram = 20
		}
		work := math.Exp(math.Log(8) + 0.9*rng.NormFloat64()) // hours at full speed, scaled below
		ck := min(48000, max(120, 3200*math.Exp(1.1*rng.NormFloat64())))
		jobs[i] = trace.JobRec{
			T:  rng.Float64() * dur * 0.92,
			ID: fmt.Sprintf("j%04d", i+1), GPUs: g, VRAMGB: vram, Capability: 7.0,
			WorkGPUh:     work * float64(g),
			CheckpointMB: math.Round(ck),
			RestartS:     math.Round(30 + 90*rng.Float64()),
			LossBudgetS:  math.Round(c.LossBudgetMin.Seconds() + (c.LossBudgetMax-c.LossBudgetMin).Seconds()*rng.Float64()),
		}
		sumWork += jobs[i].WorkGPUh
	}
	scale := c.GPUHours / sumWork
	for i := range jobs {
		jobs[i].WorkGPUh = math.Round(jobs[i].WorkGPUh*scale*1000) / 1000
		jobs[i].T = math.Round(jobs[i].T)
	}
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].T < jobs[b].T })
	for i := range jobs {
		jobs[i].ID = fmt.Sprintf("j%04d", i+1)
	}
	tr.Jobs = jobs
}

// timeOfDay is the offset of ts from its UTC midnight.
func timeOfDay(ts time.Time) time.Duration {
	ts = ts.UTC()
	return time.Duration(ts.Hour())*time.Hour + time.Duration(ts.Minute())*time.Minute +
		time.Duration(ts.Second())*time.Second + time.Duration(ts.Nanosecond())
}

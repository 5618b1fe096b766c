package sim

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// svgTexts returns the text elements of an SVG file.
func svgTexts(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(string(b), -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

// plotReport is a report whose losses span five orders of magnitude, with
// an oracle that loses nothing and has no interruptions.
func plotReport() *Report {
	row := func(key, name string, scale float64, downtimes []float64) Row {
		r := Result{Downtimes: downtimes}
		for d := 0; d <= 20; d++ {
			r.LossSeries = append(r.LossSeries, SeriesPoint{T: float64(d) * 86400, LossGPUh: scale * float64(d)})
		}
		for h := 0; h < 24*20; h++ {
			r.HazardSeries = append(r.HazardSeries, HazardPoint{T: float64(h)*3600 + 1800, Estimated: 0.001 * float64(1+h%24)})
		}
		return Row{Key: key, Name: name, PerSeed: []Result{r}}
	}
	rep := &Report{Rows: []Row{
		row("b2", "B2 no migration", 36, []float64{40, 60, 90}),
		row("reclaimnet", "ReclaimNet", 0.01, []float64{3, 90, 400}),
		row("b1", "B1 Bamboo-like", 0.0005, []float64{0.5, 2}),
		{Key: "b6", Name: "B6 oracle (hindsight)", PerSeed: []Result{{}}},
	}}
	return rep
}

// The plots: log axes with round ticks, every policy in the legend (the
// oracle on the floor), the hazard as a 24 h profile.
func TestPlots(t *testing.T) {
	dir := t.TempDir()
	rep := plotReport()
	if err := writePlots(dir, rep, func(t float64) float64 { return 2e-3 / 3600 }); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"work_loss.svg", "downtime_cdf.svg", "hazard.svg"} {
		texts := strings.Join(svgTexts(t, filepath.Join(dir, f)), "\n")
		for _, r := range rep.Rows {
			if f != "hazard.svg" && !strings.Contains(texts, r.Name) {
				t.Errorf("%s: no legend entry for %s", f, r.Name)
			}
		}
		fi, _ := os.Stat(filepath.Join(dir, f))
		if fi.Size() > 100<<10 {
			t.Errorf("%s: %d bytes, want a plot a browser opens at once (< 100 KiB)", f, fi.Size())
		}
	}
	loss := svgTexts(t, filepath.Join(dir, "work_loss.svg"))
	if !contains(loss, "B6 oracle (hindsight) (0: on the axis floor)") {
		t.Errorf("work_loss.svg: the oracle is not marked as drawn on the floor: %q", loss)
	}
	// Log ticks: powers of ten from the floor's decade to the largest loss.
	for _, want := range []string{"0.001", "0.01", "0.1", "1", "10", "100"} {
		if !contains(loss, want) {
			t.Errorf("work_loss.svg: no %s tick on the log axis: %q", want, loss)
		}
	}
	for _, f := range []string{"work_loss.svg", "downtime_cdf.svg", "hazard.svg"} {
		for _, s := range svgTexts(t, filepath.Join(dir, f)) {
			if v, err := strconv.ParseFloat(s, 64); err == nil && !roundNumber(v) {
				t.Errorf("%s: tick label %q is not a round number", f, s)
			}
		}
	}
	cdf := svgTexts(t, filepath.Join(dir, "downtime_cdf.svg"))
	if !contains(cdf, "B6 oracle (hindsight) (no interruptions)") {
		t.Errorf("downtime_cdf.svg: the oracle's entry does not say it had no interruptions: %q", cdf)
	}
	hz := svgTexts(t, filepath.Join(dir, "hazard.svg"))
	for _, want := range []string{"00:00", "12:00", "24:00", "true λ (generator)", "estimated λ̂ (global)", "hour of day, UTC"} {
		if !contains(hz, want) {
			t.Errorf("hazard.svg lacks %q: %q", want, hz)
		}
	}
}

// roundNumber reports whether v is d × 10ⁿ with d in 1, 2, 2.5, 5 (or a
// multiple of a round step with at most two significant digits).
func roundNumber(v float64) bool {
	if v == 0 {
		return true
	}
	mant := math.Abs(v) / math.Pow(10, math.Floor(math.Log10(math.Abs(v))))
	return math.Abs(mant*10-math.Round(mant*10)) < 1e-6
}

// dailyHazard folds a series onto the day: each bucket is the mean of
// the samples in it, against a brute-force grouping.
func TestDailyHazard(t *testing.T) {
	var series []HazardPoint
	for k := 0; k < 3*hazardBuckets*2; k++ { // three days, two samples per bucket
		ts := float64(k) * 86400 / float64(hazardBuckets*2)
		series = append(series, HazardPoint{T: ts, Estimated: float64(k%7) + ts/86400})
	}
	truth := func(ts float64) float64 { return math.Mod(ts, 86400) / 3600 / 3600 } // hour of day, per s
	h := dailyHazard(series, truth)
	if len(h.Hours) != hazardBuckets || len(h.True) != hazardBuckets {
		t.Fatalf("got %d buckets (%d true), want %d", len(h.Hours), len(h.True), hazardBuckets)
	}
	for b := range hazardBuckets {
		var est, tru float64
		n := 0
		for _, p := range series {
			if int(math.Mod(p.T, 86400)/(86400/hazardBuckets)) == b {
				est += p.Estimated
				tru += truth(p.T) * 3600
				n++
			}
		}
		if math.Abs(h.Estimated[b]-est/float64(n)) > 1e-9 || math.Abs(h.True[b]-tru/float64(n)) > 1e-9 {
			t.Errorf("bucket %d: got %v / %v, want %v / %v", b, h.Estimated[b], h.True[b], est/float64(n), tru/float64(n))
		}
		if want := (float64(b) + 0.5) * 24 / hazardBuckets; math.Abs(h.Hours[b]-want) > 1e-9 {
			t.Errorf("bucket %d centred at %v h, want %v", b, h.Hours[b], want)
		}
	}
	if dailyHazard(series, nil).True != nil {
		t.Errorf("without a generator: want no true profile")
	}
}

// roundTicks: steps of 1, 2 or 5 × 10ⁿ, about six labels covering the
// range, written plainly.
func TestRoundTicks(t *testing.T) {
	for _, r := range [][2]float64{{0, 58.3}, {0, 1}, {0, 0.0123}, {3, 7}, {0, 727}, {0, 24}} {
		var labelled []float64
		for _, tk := range (roundTicks{}).Ticks(r[0], r[1]) {
			if tk.Label == "" {
				continue
			}
			if tk.Value < r[0]-1e-12 || tk.Value > r[1]+1e-9 {
				t.Errorf("%v: tick %v outside the range", r, tk.Value)
			}
			if strings.Contains(tk.Label, "e") || strings.HasSuffix(tk.Label, "0") && strings.Contains(tk.Label, ".") {
				t.Errorf("%v: label %q not plain", r, tk.Label)
			}
			labelled = append(labelled, tk.Value)
		}
		if n := len(labelled); n < 3 || n > 11 {
			t.Errorf("%v: %d labelled ticks %v, want 3..11", r, n, labelled)
			continue
		}
		step := labelled[1] - labelled[0]
		if !roundNumber(step) || step*float64(len(labelled)+1) < (r[1]-r[0]) {
			t.Errorf("%v: step %v is not round or the ticks do not cover the range: %v", r, step, labelled)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

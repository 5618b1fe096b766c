package sim

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var rewriteFixtures = flag.Bool("rewrite-fixtures", false, "rewrite the synthetic trace fixtures in testdata/traces")

// fixtureTraces is the directory of synthetic traces in the formats of the
// public traces that do not ship (testdata/traces/README.md).
const fixtureTraces = "testdata/traces"

// Shape of the fixtures; the importer tests derive their expectations
// from these.
const (
	fixtureMachines = 60
	fixtureHours    = 336 // two weeks
	fixturePods     = 400
	fixtureRuntimes = 2000
)

// traceFixtures generates the fixtures from a fixed seed: random data in
// the upstream formats, derived from no real trace.
func traceFixtures() map[string][]byte {
	rng := rand.New(rand.NewPCG(2026, 16))
	out := map[string][]byte{}

	// microsoft99: one row per machine, one tab-separated 0/1 column per
	// hour, CRLF line ends as upstream. Each machine is a two-state chain
	// with its own rates; one in ten starts switched off.
	var ping bytes.Buffer
	for m := 0; m < fixtureMachines; m++ {
		pDown := 0.005 + 0.075*rng.Float64()
		pUp := 1 / (1 + 11*rng.Float64())
		on := rng.Float64() >= 0.1
		for h := 0; h < fixtureHours; h++ {
			if h > 0 {
				ping.WriteByte('\t')
				if on && rng.Float64() < pDown {
					on = false
				} else if !on && rng.Float64() < pUp {
					on = true
				}
			}
			if on {
				ping.WriteByte('1')
			} else {
				ping.WriteByte('0')
			}
		}
		ping.WriteString("\r\n")
	}
	out[fileMicrosoft] = ping.Bytes()

	// Alibaba GPU v2023 pod list: the upstream columns; CPU-only pods,
	// fractional GPU shares, 8-GPU pods and pods never scheduled occur as
	// they do there.
	var pods bytes.Buffer
	pods.WriteString("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n")
	created := 0
	for i := 0; i < fixturePods; i++ {
		gpus, milli := 1, 1000
		switch u := rng.Float64(); {
		case u < 0.13:
			gpus, milli = 0, 0
		case u < 0.15:
			gpus = 8
		case u < 0.17:
			gpus = 2
		case u < 0.19:
			gpus = 4
		case u < 0.60:
			milli = 100 + 10*rng.IntN(90)
		}
		qos := []string{"LS", "BE", "Burstable", "Guaranteed"}[rng.IntN(4)]
		run := int(math.Min(4e6, 600*math.Exp(2*rng.NormFloat64())))
		scheduled := fmt.Sprint(created + rng.IntN(30))
		phase := []string{"Running", "Failed", "Succeeded"}[rng.IntN(3)]
		deleted := created + 30 + run
		if rng.Float64() < 0.11 {
			scheduled, phase = "", "Pending"
		}
		fmt.Fprintf(&pods, "fixture-pod-%04d,%d,%d,%d,%d,,%s,%s,%d,%d,%s\n",
			i, 1000*(1+rng.IntN(32)), 1024*(1+rng.IntN(64)), gpus, milli, qos, phase, created, deleted, scheduled)
		created += rng.IntN(60000)
	}
	out[fileAlibaba] = pods.Bytes()

	// Philly runtimes: one column, seconds, sorted ascending as upstream,
	// with the many zero and sub-minute runtimes the importer drops.
	runtimes := make([]float64, fixtureRuntimes)
	for i := range runtimes {
		runtimes[i] = math.Round(math.Min(5e6, math.Max(0, 3000*math.Exp(2.5*rng.NormFloat64())-200)))
	}
	sort.Float64s(runtimes)
	var philly bytes.Buffer
	philly.WriteString("runtime\n")
	for _, v := range runtimes {
		fmt.Fprintf(&philly, "%.1f\n", v)
	}
	out[filePhilly] = philly.Bytes()
	return out
}

// TestTraceFixturesAreGenerated checks that testdata/traces holds exactly
// what traceFixtures makes, so the fixtures stay synthetic and
// reproducible; -rewrite-fixtures writes them.
func TestTraceFixturesAreGenerated(t *testing.T) {
	for name, want := range traceFixtures() {
		path := filepath.Join(fixtureTraces, filepath.FromSlash(name))
		if *rewriteFixtures {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("fixture: %v (go test ./sim -run TestTraceFixturesAreGenerated -rewrite-fixtures writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what traceFixtures generates (rewrite with -rewrite-fixtures)", path)
		}
	}
}

func TestBambooIntervals(t *testing.T) {
	in := "0,add,n1\n0,add,n2\n0,add,n3\n1500,remove,n3\n1500,remove,n1\n2000,add,n4\n\n3000,add,n1\n4000,remove,n4\n"
	got, err := bambooIntervals(strings.NewReader(in), "t.csv")
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by (start, end); n3 before n1 (removed first), then n2 still
	// up (censored at the last event), n4, and n1's second run.
	want := []interval{
		{unit: "n3", up: true, start: 0, end: 1.5, transition: true},
		{unit: "n1", up: true, start: 0, end: 1.5, transition: true},
		{unit: "n2", up: true, start: 0, end: 4},
		{unit: "n4", up: true, start: 2, end: 4, transition: true},
		{unit: "n1", up: true, start: 3, end: 4},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"0,add,n1\n5,add,n1\n", "t.csv:2: n1 added while up"},
		{"0,add,n1\n5,remove,n2\n", "t.csv:2: n2 removed while not up"},
		{"10,add,n1\n5,remove,n1\n", "t.csv:2: n1 removed at 0.005 s, before its add at 0.01 s"},
		{"0,start,n1\n", "t.csv:1: event \"start\", want add or remove"},
		{"x,add,n1\n", "t.csv:1: time \"x\": want milliseconds"},
		{"-1,add,n1\n", "t.csv:1: time \"-1\": want milliseconds"},
		{"0,add\n", "t.csv:1: 2 fields, want t_ms,add|remove,node"},
		{"0,add, \n", "t.csv:1: empty node name"},
	} {
		_, err := bambooIntervals(strings.NewReader(tc.in), "t.csv")
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %s", tc.in, err, tc.want)
		}
	}
}

func TestPingIntervals(t *testing.T) {
	got, err := pingIntervals(strings.NewReader("1\t1\t0\t1\r\n0\t0\t0\t0\r\n"), "p.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []interval{
		{unit: "m0000", up: true, start: 0, end: 7200, transition: true},
		{unit: "m0000", up: false, start: 7200, end: 10800, transition: true},
		{unit: "m0000", up: true, start: 10800, end: 14400},
		{unit: "m0001", up: false, start: 0, end: 14400},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"1\t0\n1\n", "p.txt:2: 1 columns, want 2 like the first row"},
		{"1\t2\n", "p.txt:1: column 2 is \"2\", want 0 or 1"},
	} {
		_, err := pingIntervals(strings.NewReader(tc.in), "p.txt")
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %s", tc.in, err, tc.want)
		}
	}
}

// TestShippedBambooTraces reads the embedded Bamboo traces: every instance
// is one unit, and the instances still up at the end are censored.
func TestShippedBambooTraces(t *testing.T) {
	for _, tc := range []struct {
		file              string
		units, censored   int
		removals, minHour float64
	}{{fileBambooP3, 177, 10, 167, 11}, {fileBambooG4, 79, 5, 74, 10}} {
		f, name, err := traceFiles{}.open(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		ivs, err := bambooIntervals(f, name)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		units := map[string]bool{}
		censored, end := 0, 0.0
		for _, iv := range ivs {
			units[iv.unit] = true
			if !iv.transition {
				censored++
			}
			end = math.Max(end, iv.end)
		}
		if len(units) != tc.units || censored != tc.censored || float64(len(ivs)-censored) != tc.removals || end < tc.minHour*3600 {
			t.Errorf("%s: got %d units, %d censored, %d removals, %.0f s; want %d, %d, %.0f, over %.0f h",
				tc.file, len(units), censored, len(ivs)-censored, end, tc.units, tc.censored, tc.removals, tc.minHour)
		}
	}
}

func TestTraceFilesMissingSaysWhere(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		_, _, err := traceFiles{dir: dir}.open(fileMicrosoft)
		if err == nil || !strings.Contains(err.Error(), "github.com/inkrement/SLA") || !strings.Contains(err.Error(), "-traces DIR") {
			t.Errorf("dir %q: got %v, want an error saying where to download the file and how to pass it", dir, err)
		}
	}
}

func FuzzBambooIntervals(f *testing.F) {
	f.Add("0,add,n1\n0,add,n2\n1500,remove,n1\n")
	f.Add("0,add,n1\n1,remove,n1\n2,add,n1\n")
	f.Add("5,remove,n1\n")
	f.Fuzz(func(t *testing.T, in string) {
		ivs, err := bambooIntervals(strings.NewReader(in), "f")
		if err != nil {
			return
		}
		for i, iv := range ivs {
			if iv.end < iv.start || !iv.up || iv.start < 0 {
				t.Fatalf("bad interval %+v", iv)
			}
			if i > 0 && (iv.start < ivs[i-1].start || iv.start == ivs[i-1].start && iv.end < ivs[i-1].end) {
				t.Fatalf("intervals out of order at %d: %+v after %+v", i, iv, ivs[i-1])
			}
		}
	})
}

func FuzzPingIntervals(f *testing.F) {
	f.Add("1\t1\t0\t1\r\n0\t0\t0\t0\r\n")
	f.Add("1\n0\n")
	f.Add("1\t0\n1\n")
	f.Fuzz(func(t *testing.T, in string) {
		ivs, err := pingIntervals(strings.NewReader(in), "f")
		if err != nil {
			return
		}
		for i, iv := range ivs {
			if iv.end <= iv.start {
				t.Fatalf("empty or reversed interval %+v", iv)
			}
			// A unit's runs tile its hours and alternate up and down.
			if i > 0 && ivs[i-1].unit == iv.unit && (ivs[i-1].end != iv.start || ivs[i-1].up == iv.up) {
				t.Fatalf("runs %+v and %+v do not alternate end to start", ivs[i-1], iv)
			}
		}
	})
}

package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var rewriteGolden = flag.Bool("rewrite", false, "rewrite policy/testdata/tick-golden.txt from the current Tick")

// goldenCase is one fixed Tick input whose Decisions are pinned.
type goldenCase struct {
	name string
	snap func() Snapshot
}

// withCarried adds, for every job on a scheduled-reclaim node, a migration
// flow from an earlier period (every other one to a node that is leaving,
// so P2 must choose again), exercising the carried-flow path of Tick.
func withCarried(s Snapshot, rng *rand.Rand) Snapshot {
	leaving := map[NodeID]bool{}
	for _, r := range s.Reclaims {
		leaving[r.Node] = true
	}
	for k, j := range s.Jobs {
		if j.State != JobRunning || !leaving[j.Node] || rng.IntN(3) == 0 {
			continue
		}
		to := s.Nodes[rng.IntN(len(s.Nodes))].ID
		if k%2 == 0 {
			to = s.Reclaims[0].Node
		}
		s.Flows = append(s.Flows, Flow{
			ID: "mig/" + string(j.ID), Job: j.ID, From: j.Node, To: to, Class: ClassMigration,
			Remaining: j.CheckpointBytes / 3, Start: testEpoch.Add(time.Duration(rng.IntN(20)) * time.Second),
		})
	}
	return s
}

func goldenCases() []goldenCase {
	cases := []goldenCase{
		{name: "bench-54-warm", snap: func() Snapshot { return benchSnapshot(54, 50, false) }},
		{name: "bench-54-cold", snap: func() Snapshot { return benchSnapshot(54, 50, true) }},
		{name: "bench-500-warm", snap: func() Snapshot { return benchSnapshot(500, 500, false) }},
		{name: "bench-500-cold", snap: func() Snapshot { return benchSnapshot(500, 500, true) }},
		{name: "bench-5000-warm", snap: func() Snapshot { return benchSnapshot(5000, 5000, false) }},
		{name: "bench-500-varied", snap: func() Snapshot { return benchSnapshotOf(500, 500, false, true) }},
		{name: "bench-500-cold-varied", snap: func() Snapshot { return benchSnapshotOf(500, 500, true, true) }},
		{name: "bench-5000-varied", snap: func() Snapshot { return benchSnapshotOf(5000, 5000, false, true) }},
		{name: "bench-54-cold-varied", snap: func() Snapshot { return benchSnapshotOf(54, 50, true, true) }},
	}
	variants := []struct {
		name string
		mod  func(*Snapshot, *rand.Rand)
	}{
		{"default", func(*Snapshot, *rand.Rand) {}},
		{"carried", func(s *Snapshot, rng *rand.Rand) { *s = withCarried(*s, rng) }},
		{"bmin", func(s *Snapshot, rng *rand.Rand) { s.Params.Bmin = rng.Float64() * 2 * gbit }},
		{"p1-off", func(s *Snapshot, _ *rand.Rand) { s.Params.Switches.P1 = false }},
		{"p2-off", func(s *Snapshot, _ *rand.Rand) { s.Params.Switches.P2 = false; s.Params.Seed = 7 }},
		{"p3-off", func(s *Snapshot, _ *rand.Rand) { s.Params.Switches.P3 = false }},
		{"all-off", func(s *Snapshot, _ *rand.Rand) { s.Params.Switches = Switches{} }},
		{"unbounded-lists", func(s *Snapshot, _ *rand.Rand) { s.Params.MaxCandidates = 0; s.Params.KMin = 0 }},
		{"kmin-large", func(s *Snapshot, _ *rand.Rand) { s.Params.KMin = 50; s.Params.MaxCandidates = 3 }},
		{"unbounded-lists-local", func(s *Snapshot, _ *rand.Rand) { s.Params.MaxCandidates = 0; s.Params.KMin = 1 }},
		{"short-lists-local", func(s *Snapshot, _ *rand.Rand) { s.Params.MaxCandidates = 1; s.Params.KMin = 1 }},
	}
	for seed := range uint64(4) {
		for _, v := range variants {
			cases = append(cases, goldenCase{
				name: fmt.Sprintf("scenario-%d-%s", seed, v.name),
				snap: func() Snapshot {
					rng := rand.New(rand.NewPCG(100+seed, 200+seed))
					s := scenario(rng, 2+int(seed), 4+3*int(seed), 20+25*int(seed))
					v.mod(&s, rng)
					return s
				},
			})
		}
	}
	return cases
}

// goldenTextLimit: larger outputs are pinned by their SHA-256 only, to keep
// the file small (a mismatch then names the case; diff decisionsText of the
// old and new code to see where).
const goldenTextLimit = 24 << 10

// goldenTimes shortens the times every case repeats.
var goldenTimes = strings.NewReplacer(
	testEpoch.String(), "T0",
	time.Time{}.String(), "-",
)

// decisionsText prints Decisions one item per line with every field
// (floats in their shortest exact form), so that any change shows.
func decisionsText(d Decisions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "budget %v\n", d.CheckpointBudget)
	for _, j := range d.Jobs {
		// The fields P1.5 always had, then the interval's box and P2.7's
		// holders (so a change in either shows on its own).
		fmt.Fprintf(&b, "job %v", struct {
			Job                  JobID
			Bandwidth            float64
			Interval             time.Duration
			LossBudgetInfeasible bool
			Hazard               float64
			Standby              NodeID
		}{j.Job, j.Bandwidth, j.Interval, j.LossBudgetInfeasible, j.Hazard, j.Standby})
		fmt.Fprintf(&b, " bound=%v floor=%v ceiling=%v", j.Bound, j.Floor, j.Ceiling)
		if len(j.Holders) > 0 || j.Risk != 0 {
			fmt.Fprintf(&b, " holders=%v risk=%v", j.Holders, j.Risk)
		}
		b.WriteString("\n")
	}
	for _, h := range d.Handoffs {
		c := h.Candidates
		h.Candidates = nil
		fmt.Fprintf(&b, "handoff %v\n", h)
		for _, x := range c {
			fmt.Fprintf(&b, "  cand %v\n", x)
		}
	}
	for _, p := range d.Placements {
		c := p.Candidates
		p.Candidates = nil
		fmt.Fprintf(&b, "placement %v\n", p)
		for _, x := range c {
			fmt.Fprintf(&b, "  cand %v\n", x)
		}
	}
	for _, f := range d.Flows {
		fmt.Fprintf(&b, "flow %v\n", f)
	}
	return goldenTimes.Replace(b.String())
}

// TestTickGolden pins Tick's Decisions on fixed inputs: performance work
// must not change a single output. Regenerate (only for an intended change
// of behaviour) with `go test -run TestTickGolden ./policy/ -rewrite`.
func TestTickGolden(t *testing.T) {
	path := filepath.Join("testdata", "tick-golden.txt")
	var out bytes.Buffer
	for _, c := range goldenCases() {
		text := decisionsText(Tick(c.snap(), testEpoch))
		fmt.Fprintf(&out, "=== %s\n", c.name)
		if len(text) > goldenTextLimit {
			sum := sha256.Sum256([]byte(text))
			fmt.Fprintf(&out, "sha256 %s (%d lines)\n", hex.EncodeToString(sum[:]), strings.Count(text, "\n"))
			continue
		}
		out.WriteString(text)
	}
	if *rewriteGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with -rewrite)", err)
	}
	if bytes.Equal(out.Bytes(), want) {
		return
	}
	got, wantLines := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
	section := ""
	for i := range max(len(got), len(wantLines)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if strings.HasPrefix(w, "=== ") {
			section = w
		}
		if g != w {
			t.Fatalf("Tick output differs from %s in %s at line %d:\ngot  %s\nwant %s", path, section, i+1, g, w)
		}
	}
}

// TestTickDuplicateLinkIDs: a link ID given twice counts once (the first
// entry), however the period's graph is built.
func TestTickDuplicateLinkIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	s := scenario(rng, 3, 5, 30)
	want := decisionsText(Tick(s, testEpoch))
	dup := s
	k := len(s.Links) / 2
	extra := s.Links[k]
	extra.Available, extra.AvailableLow = 1, 1 // must be ignored
	dup.Links = append(append(append([]Link(nil), s.Links[:k+1]...), extra), s.Links[k+1:]...)
	dup.Links = append(dup.Links, s.Links[0])
	if got := decisionsText(Tick(dup, testEpoch)); got != want {
		t.Errorf("Tick with duplicate link IDs differs from Tick without them")
	}
	if topo := NewTopology(dup.Links); len(topo.Links()) != len(s.Links) {
		t.Errorf("NewTopology kept %d links, want %d", len(topo.Links()), len(s.Links))
	}
}

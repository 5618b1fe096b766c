package sim

import (
	"bytes"
	"sort"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/trace"
)

// together counts departures with another departure of the same building
// within a minute.
func together(tr *trace.Trace) int {
	building := map[string]string{}
	for _, n := range tr.Nodes {
		building[n.ID] = n.Building
	}
	n := 0
	for i, d := range tr.Departures {
		for k := i - 1; k >= 0 && d.T-tr.Departures[k].T <= 60; k-- {
			if building[tr.Departures[k].Node] == building[d.Node] {
				n++
				break
			}
		}
	}
	return n
}

// TestGeneratorGroups: the correlated-departure mode keeps the independent
// departures' calibration, adds groups leaving together (with and without
// notice), names labs, and writes a version-2 trace that reads back.
func TestGeneratorGroups(t *testing.T) {
	base := DefaultGenConfig()
	plain, err := Generate(base)
	if err != nil {
		t.Fatal(err)
	}
	c := base
	c.Groups = DefaultGroupConfig()
	tr, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	added := len(tr.Departures) - len(plain.Departures)
	if added < 300 || added > 800 {
		t.Errorf("groups added %d departures, want about 500", added)
	}
	tp, tg := together(plain), together(tr)
	t.Logf("departures %d → %d; with another in the building within a minute: %d → %d", len(plain.Departures), len(tr.Departures), tp, tg)
	if tg < 5*max(tp, 20) {
		t.Errorf("departures within a minute of another in the building: %d, want far more than the independent trace's %d", tg, tp)
	}
	labs := map[string]int{}
	for _, n := range tr.Nodes {
		if n.Lab == "" {
			t.Fatalf("node %s has no lab", n.ID)
		}
		labs[n.Lab]++
	}
	for l, k := range labs {
		if k > c.Groups.LabSize {
			t.Errorf("lab %s has %d nodes, more than %d", l, k, c.Groups.LabSize)
		}
	}
	// Evening closures: announced departures at 19:00–19:01 on weekdays.
	closures, weekend := 0, 0
	for _, d := range tr.Departures {
		at := tr.Header.Start.Add(secs(d.T))
		if tod := timeOfDay(at); d.Type == trace.Scheduled && d.NoticeS == c.Groups.LabNotice.Seconds() && tod >= 19*time.Hour && tod <= 19*time.Hour+time.Minute {
			closures++
			if wd := at.Weekday(); wd == time.Saturday || wd == time.Sunday {
				weekend++
			}
		}
	}
	if closures < 100 || weekend > 0 {
		t.Errorf("evening closures: %d (%d on weekends), want hundreds on weekdays only", closures, weekend)
	}
	// A node is never taken while away: departures and returns alternate.
	byNode := map[string][]float64{}
	for _, d := range tr.Departures {
		byNode[d.Node] = append(byNode[d.Node], d.T)
	}
	for _, r := range tr.Returns {
		byNode[r.Node] = append(byNode[r.Node], -r.T)
	}
	for id, ev := range byNode {
		sort.Slice(ev, func(a, b int) bool { return abs(ev[a]) < abs(ev[b]) })
		for k := 1; k < len(ev); k++ {
			if (ev[k] > 0) == (ev[k-1] > 0) {
				t.Fatalf("node %s: two %s in a row at %.0f and %.0f", id, map[bool]string{true: "departures", false: "returns"}[ev[k] > 0], abs(ev[k-1]), abs(ev[k]))
			}
		}
	}
	var b bytes.Buffer
	if err := trace.Write(&b, tr); err != nil {
		t.Fatal(err)
	}
	back, err := trace.Read(&b, "groups.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if back.Header.Version != 2 || len(back.Departures) != len(tr.Departures) || back.Nodes[0].Lab != tr.Nodes[0].Lab {
		t.Errorf("round trip: version %d, %d departures, lab %q", back.Header.Version, len(back.Departures), back.Nodes[0].Lab)
	}
	if plain.Header.Version != 1 {
		t.Errorf("the calibrated trace is version %d, want 1 (no version-2 field)", plain.Header.Version)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

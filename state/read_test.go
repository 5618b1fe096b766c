package state

import "testing"

func TestViewSelectsWhatConcernsANode(t *testing.T) {
	f := NewStore()
	for i, c := range sampleCommands()[:9] { // up to b's reclaim of a, before the move
		if res := applyEncoded(t, f, uint64(i+1), c); res != nil {
			t.Fatal(res)
		}
	}
	a, b := f.View("a"), f.View("b")
	if len(a.Jobs) != 1 || a.Jobs[0].ID != "j1" || len(a.Intervals) != 1 || a.Reclaim == nil {
		t.Fatalf("view of a got jobs %v intervals %v reclaim %v, want j1, its interval and a reclaim", a.Jobs, a.Intervals, a.Reclaim)
	}
	if len(b.Jobs) != 0 || len(b.Intervals) != 0 || len(b.Flows) != 1 || b.Reclaim != nil {
		t.Fatalf("view of b got jobs %v intervals %v flows %v, want only the incoming flow", b.Jobs, b.Intervals, b.Flows)
	}
	if len(a.Hazard.EmergencyUpper.Rates) != 2 || a.Index != f.Index() {
		t.Fatalf("view of a got hazard %+v index %d, want the published profile at index %d", a.Hazard, a.Index, f.Index())
	}
}

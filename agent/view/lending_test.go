package view

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

// TestLendingOf: a member's published outlook and windows reach the
// members list; bytes that do not decode as an outlook (a peer's) are
// ignored, the windows still shown; a member publishing nothing has none.
func TestLendingOf(t *testing.T) {
	until := time.Date(2026, 3, 3, 7, 0, 0, 0, time.UTC)
	b, err := owner.Outlook{State: owner.StateLent, Until: until}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	l := LendingOf(mesh.Meta{Lending: "Mon-Fri 19:00-08:00 (Europe/Berlin)", Outlook: b})
	if l == nil || l.State != "lent" || !l.Until.Equal(until) || !l.From.IsZero() || l.Windows != "Mon-Fri 19:00-08:00 (Europe/Berlin)" {
		t.Errorf("lending %+v, want lent until %v with its windows", l, until)
	}
	if o, ok := Outlook(mesh.Meta{Outlook: b}); !ok || !o.Until.Equal(until) {
		t.Errorf("outlook %+v, %v", o, ok)
	}
	l = LendingOf(mesh.Meta{Lending: "always (UTC)", Outlook: []byte{9, 9, 9}})
	if l == nil || l.State != "" || !l.Until.IsZero() || l.Windows != "always (UTC)" {
		t.Errorf("lending with a bad outlook %+v, want the windows alone", l)
	}
	if _, ok := Outlook(mesh.Meta{Outlook: []byte{9, 9, 9}}); ok {
		t.Error("a bad outlook decoded")
	}
	if l := LendingOf(mesh.Meta{}); l != nil {
		t.Errorf("lending %+v for a member that publishes none", l)
	}
}

// TestDepartedLending: a node out of the cluster shows the lending its
// last departure's report recorded, not an older one's, with the windows
// it last announced (its last gossip metadata while gossip still knows it,
// else the registry); its own last gossiped state ("reclaiming" as its
// window ended) is never shown once it has left, while a live member's
// is.
func TestDepartedLending(t *testing.T) {
	from := time.Date(2026, 3, 3, 19, 0, 0, 0, time.UTC)
	cs := state.New()
	cs.Nodes["n1"] = state.NodeRecord{ID: "n1", Lending: "Mon-Fri 19:00-08:00 (UTC)"}
	cs.Nodes["n2"] = state.NodeRecord{ID: "n2", Lending: "always (UTC)"}
	cs.ReclaimReports = []state.ReclaimReport{
		{Node: "n1", LendingAfter: "owner active", LendableFrom: from.Add(-time.Hour)},
		{Node: "n2", LendingAfter: "reclaimed"},
		{Node: "n1", LendingAfter: "outside window", LendableFrom: from},
		{Node: "n2"},
	}
	want := func(name string, got *web.Lending, w *web.Lending) {
		t.Helper()
		if (got == nil) != (w == nil) || got != nil && *got != *w {
			t.Errorf("%s: lending %+v, want %+v", name, got, w)
		}
	}
	// Forgotten by gossip: the history's state, the registry's windows.
	want("n1 forgotten", departedLending(cs, "n1", ""), &web.Lending{Windows: "Mon-Fri 19:00-08:00 (UTC)", State: "outside window", From: from})
	want("n2 forgotten", departedLending(cs, "n2", ""), &web.Lending{Windows: "always (UTC)"})
	want("n3 unknown", departedLending(cs, "n3", ""), nil)

	// Still in gossip, left, its last metadata saying "reclaiming" until
	// its window's end: the history's state, the metadata's windows.
	until := from.Add(-time.Minute)
	b, err := owner.Outlook{State: owner.StateReclaiming, Until: until}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	meta := mesh.Meta{Lending: "Mon-Fri 18:00-08:00 (UTC)", Outlook: b}
	want("n1 left", memberLending(cs, "n1", meta, true), &web.Lending{Windows: "Mon-Fri 18:00-08:00 (UTC)", State: "outside window", From: from})
	want("n3 left, no history", memberLending(cs, "n3", meta, true), &web.Lending{Windows: "Mon-Fri 18:00-08:00 (UTC)"})
	want("n1 alive", memberLending(cs, "n1", meta, false), &web.Lending{Windows: "Mon-Fri 18:00-08:00 (UTC)", State: string(owner.StateReclaiming), Until: until})
}

package view

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/state"
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

// TestLendingAfter: a node out of the cluster shows the lending its last
// reclaim's report recorded, not an older one's; none when the last report
// recorded none.
func TestLendingAfter(t *testing.T) {
	from := time.Date(2026, 3, 3, 19, 0, 0, 0, time.UTC)
	cs := state.New()
	cs.ReclaimReports = []state.ReclaimReport{
		{Node: "n1", LendingAfter: "owner active", LendableFrom: from.Add(-time.Hour)},
		{Node: "n2", LendingAfter: "reclaimed"},
		{Node: "n1", LendingAfter: "outside window", LendableFrom: from},
		{Node: "n2"},
	}
	if l := lendingAfter(cs, "n1"); l == nil || l.State != "outside window" || !l.From.Equal(from) {
		t.Errorf("n1: %+v, want outside window from %v (its last report)", l, from)
	}
	if l := lendingAfter(cs, "n2"); l != nil {
		t.Errorf("n2: %+v, want none (its last report records none)", l)
	}
	if l := lendingAfter(cs, "n3"); l != nil {
		t.Errorf("n3: %+v, want none (no report)", l)
	}
}

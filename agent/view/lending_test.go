package view

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/mesh"
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

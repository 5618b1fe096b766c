package pki

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func issueAt(t *testing.T, ca *CA, node string, at time.Time) *Bundle {
	t.Helper()
	nc, err := ca.Issue(node, nil, 48*time.Hour, at)
	if err != nil {
		t.Fatal(err)
	}
	b, err := nc.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDenyListCheck(t *testing.T) {
	ca := mustCA(t, "lab")
	now := time.Now()
	removed := now.Add(-time.Hour)
	before := issueAt(t, ca, "lab-b", removed.Add(-time.Minute)) // issued before the removal
	after := issueAt(t, ca, "lab-b", removed.Add(time.Minute))   // a fresh join after it
	other := issueAt(t, ca, "lab-c", removed.Add(-time.Minute))
	leaked := issueAt(t, ca, "lab-d", now)

	d := NewDenyList(
		DenyEntry{Node: "lab-b", IssuedBefore: removed, Reason: "removed"},
		DenyEntry{Serial: strings.ToUpper(Serial(leaked.Leaf)), Reason: "key leaked"},
	)
	for _, c := range []struct {
		name   string
		b      *Bundle
		denied bool
		msg    string
	}{
		{"issued before removal", before, true, `node "lab-b" was removed at`},
		{"issued after removal", after, false, ""},
		{"another node", other, false, ""},
		{"denied serial", leaked, true, "key leaked"},
	} {
		err := d.Check(c.b.Leaf)
		if c.denied != (err != nil) || (err != nil && (!errors.Is(err, ErrRevoked) || !strings.Contains(err.Error(), c.msg))) {
			t.Errorf("%s: got %v, want denied=%v with %q", c.name, err, c.denied, c.msg)
		}
	}

	// A node entry without a cut-off denies every certificate of the name,
	// and it is the wider of two entries for one name that counts.
	d.Replace([]DenyEntry{{Node: "lab-b", IssuedBefore: removed}, {Node: "lab-b"}, {Node: "lab-b", IssuedBefore: removed.Add(-time.Hour)}})
	if err := d.Check(after.Leaf); !errors.Is(err, ErrRevoked) {
		t.Errorf("name denied outright: got %v for a later certificate, want ErrRevoked", err)
	}
	d.Replace([]DenyEntry{{Node: "lab-b", IssuedBefore: removed.Add(-time.Hour)}, {Node: "lab-b", IssuedBefore: removed}})
	if err := d.Check(before.Leaf); !errors.Is(err, ErrRevoked) {
		t.Errorf("two cut-offs: got %v, want the later one to deny", err)
	}
	if got := d.Entries(); len(got) != 1 || !got[0].IssuedBefore.Equal(removed) {
		t.Errorf("Entries: got %+v, want the one wider entry", got)
	}
	d.Replace(nil)
	if err := d.Check(before.Leaf); err != nil {
		t.Errorf("empty list: got %v", err)
	}
}

// The deny list is consulted by both sides of a real handshake, and a
// change reaches configurations made before it.
func TestDenyListInHandshake(t *testing.T) {
	ca := mustCA(t, "lab")
	a, b := mustBundle(t, ca, "node-a"), mustBundle(t, ca, "node-b")
	deny := NewDenyList()
	a.Deny, b.Deny = deny, deny
	srv, cli := b.ServerTLS("x"), a.ClientTLS("node-b", "x")
	if cerr, serr := handshake(t, srv, cli); cerr != nil || serr != nil {
		t.Fatalf("before revocation: client %v, server %v", cerr, serr)
	}

	deny.Replace([]DenyEntry{{Node: "node-a", Reason: "removed"}})
	_, serr := handshake(t, srv, cli)
	if !errors.Is(serr, ErrRevoked) || !strings.Contains(serr.Error(), `"node-a"`) {
		t.Errorf("revoked client: server error %v, want ErrRevoked naming node-a", serr)
	}

	deny.Replace([]DenyEntry{{Serial: Serial(b.Leaf)}})
	cerr, _ := handshake(t, srv, cli)
	if !errors.Is(cerr, ErrRevoked) {
		t.Errorf("revoked server: client error %v, want ErrRevoked", cerr)
	}
}

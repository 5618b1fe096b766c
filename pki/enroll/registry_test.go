package enroll

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func addToken(t *testing.T, r *Registry, ttl time.Duration, uses int, now time.Time) Token {
	t.Helper()
	tok, rec, err := NewToken(testFP, ttl, uses, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddToken(rec); err != nil {
		t.Fatal(err)
	}
	return tok
}

func admission(tok Token, node string, now time.Time) Admission {
	return Admission{TokenID: tok.ID, SecretHash: tok.SecretHash(), CA: tok.CA, Node: node, Now: now}
}

func TestRegistryRefusals(t *testing.T) {
	r := NewRegistry()
	tok := addToken(t, r, time.Hour, 1, t0)
	revoked := addToken(t, r, time.Hour, 0, t0)
	if err := r.RevokeToken(revoked.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.Admit(admission(tok, "lab-a", t0), CertInfo{Serial: "a1"}); err != nil {
		t.Fatal(err)
	}
	fresh := addToken(t, r, time.Hour, 0, t0)

	wrongSecret := tok
	wrongSecret.Secret = strings.Repeat("0", 32)
	unknown := tok
	unknown.ID = strings.Repeat("f", 16)
	otherCluster := admission(fresh, "lab-z", t0)
	otherCluster.CA = strings.Repeat("e", 64)
	for _, c := range []struct {
		name string
		a    Admission
		want error
		msg  string
	}{
		{"wrong secret", admission(wrongSecret, "lab-b", t0), ErrWrongToken, "no such token"},
		{"unknown ID", admission(unknown, "lab-b", t0), ErrWrongToken, "no such token"},
		{"another cluster", otherCluster, ErrForeignCluster, "sha256:0123456789abcdef, not sha256:eeee"},
		{"revoked", admission(revoked, "lab-b", t0.Add(2*time.Minute)), ErrTokenRevoked, "revoked at 2026-03-01T09:01:00Z"},
		{"expired", admission(fresh, "lab-b", t0.Add(time.Hour)), ErrTokenExpired, "expired at 2026-03-01T10:00:00Z"},
		{"used up", admission(tok, "lab-b", t0), ErrTokenUsedUp, "has no joins left (it allowed 1: lab-a)"},
		{"name taken", admission(fresh, "lab-a", t0), ErrNameTaken, `"lab-a" joined at 2026-03-01T09:00:00Z`},
		// A caller without the secret learns nothing of the token's state.
		{"wrong secret of a used-up token", admission(wrongSecret, "lab-a", t0.Add(2*time.Hour)), ErrWrongToken, "no such token"},
	} {
		before, _ := json.Marshal(r)
		err := r.Admit(c.a, CertInfo{Serial: "b2"})
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: got %v, want %v with %q", c.name, err, c.want, c.msg)
		}
		if err2 := r.CheckJoin(c.a); !errors.Is(err2, c.want) {
			t.Errorf("%s: CheckJoin got %v, Admit %v", c.name, err2, err)
		}
		if after, _ := json.Marshal(r); string(after) != string(before) {
			t.Errorf("%s: a refused admission changed the registry", c.name)
		}
	}
}

func TestRegistryAdmitConsumesOnceAndRetriesSafely(t *testing.T) {
	r := NewRegistry()
	tok := addToken(t, r, time.Hour, 2, t0)
	a := admission(tok, "lab-a", t0)
	if err := r.CheckJoin(a); err != nil {
		t.Fatal(err)
	}
	if r.Tokens[tok.ID].Used != 0 {
		t.Fatal("CheckJoin consumed a use")
	}
	cert := CertInfo{Serial: "a1", NotAfter: t0.Add(90 * 24 * time.Hour)}
	for range 3 { // the same command, retried through leader changes
		if err := r.Admit(a, cert); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Tokens[tok.ID]; got.Used != 1 || !reflect.DeepEqual(got.Nodes, []string{"lab-a"}) {
		t.Errorf("after one admission applied three times: used %d by %v, want 1 by [lab-a]", got.Used, got.Nodes)
	}
	if n := r.Nodes["lab-a"]; n.Serial != "a1" || n.Token != tok.ID || !n.Enrolled.Equal(t0) {
		t.Errorf("node record: got %+v", n)
	}
	// The same name with another certificate is another join: refused.
	if err := r.Admit(a, CertInfo{Serial: "a2"}); !errors.Is(err, ErrNameTaken) {
		t.Errorf("second join of lab-a: got %v, want ErrNameTaken", err)
	}
	if err := r.Admit(admission(tok, "lab-b", t0), CertInfo{Serial: "b1"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Admit(admission(tok, "lab-c", t0), CertInfo{Serial: "c1"}); !errors.Is(err, ErrTokenUsedUp) {
		t.Errorf("third join on a two-use token: got %v, want ErrTokenUsedUp", err)
	}
}

func TestRegistryRenewRemoveRevokeList(t *testing.T) {
	r := NewRegistry()
	tok := addToken(t, r, time.Hour, 0, t0)
	if err := r.Admit(admission(tok, "lab-a", t0), CertInfo{Serial: "a1"}); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(60 * 24 * time.Hour)
	if err := r.Renewed("lab-a", CertInfo{Serial: "a2"}, later); err != nil {
		t.Fatal(err)
	}
	if err := r.Renewed("lab-a", CertInfo{Serial: "a2"}, later.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := r.Nodes["lab-a"]; n.Serial != "a2" || !n.Renewed.Equal(later) {
		t.Errorf("after renewal (applied twice): got %+v, want serial a2 renewed at %v", n, later)
	}
	if err := r.Renewed("lab-x", CertInfo{Serial: "x"}, later); !errors.Is(err, ErrNotEnrolled) {
		t.Errorf("renewal of a node that never joined: got %v, want ErrNotEnrolled", err)
	}

	removedAt := later.Add(time.Hour)
	e := r.RemoveNode("lab-a", removedAt)
	if e.Node != "lab-a" || !e.IssuedBefore.Equal(removedAt) || len(r.Deny) != 1 {
		t.Errorf("RemoveNode: entry %+v, deny list %+v", e, r.Deny)
	}
	if again := r.RemoveNode("lab-a", removedAt); again != e || len(r.Deny) != 1 {
		t.Errorf("RemoveNode applied again: %+v, deny list %+v", again, r.Deny)
	}
	if err := r.Renewed("lab-a", CertInfo{Serial: "a3"}, removedAt); !errors.Is(err, ErrNotEnrolled) {
		t.Errorf("renewal after removal: got %v, want ErrNotEnrolled", err)
	}
	// The name is free for a fresh join.
	if err := r.Admit(admission(tok, "lab-a", t0.Add(time.Minute)), CertInfo{Serial: "a9"}); err != nil {
		t.Errorf("join again after removal: %v", err)
	}
	// Removed again later, the cut-off moves forward.
	if e2 := r.RemoveNode("lab-a", removedAt.Add(time.Hour)); !e2.IssuedBefore.Equal(removedAt.Add(time.Hour)) || len(r.Deny) != 1 {
		t.Errorf("second removal: %+v, deny list %+v", e2, r.Deny)
	}

	if err := r.RevokeToken(tok.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.RevokeToken(tok.ID, t0.Add(time.Hour)); err != nil || !r.Tokens[tok.ID].Revoked.Equal(t0.Add(time.Minute)) {
		t.Errorf("revoking twice: %v, revoked at %v; want the first time kept", err, r.Tokens[tok.ID].Revoked)
	}
	if err := r.RevokeToken("0000000000000000", t0); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("revoking an unknown token: got %v, want ErrUnknownToken", err)
	}

	second := addToken(t, r, 2*time.Hour, 0, t0.Add(-time.Hour))
	list := r.ListTokens()
	if len(list) != 2 || list[0].ID != second.ID || list[1].ID != tok.ID {
		t.Errorf("ListTokens: got %v, want oldest first", list)
	}
	if list[1].State(t0) != Revoked || list[0].State(t0) != Active {
		t.Errorf("states: %s, %s", list[0].State(t0), list[1].State(t0))
	}
}

func TestRegistryAddToken(t *testing.T) {
	r := NewRegistry()
	_, rec, err := NewToken(testFP, time.Hour, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddToken(rec); err != nil {
		t.Fatal(err)
	}
	if err := r.AddToken(rec); err != nil {
		t.Errorf("the same record again (a retried command): %v", err)
	}
	clash := rec
	clash.SecretHash = make([]byte, 32)
	if err := r.AddToken(clash); err == nil {
		t.Error("another token with the same ID: got nil error")
	}
	for name, edit := range map[string]func(*Record){
		"bad ID":         func(r *Record) { r.ID = "xyz" },
		"no hash":        func(r *Record) { r.SecretHash = nil },
		"bad CA":         func(r *Record) { r.CA = "x" },
		"expires first":  func(r *Record) { r.Expires = r.Created },
		"negative count": func(r *Record) { r.MaxUses = -1 },
	} {
		bad := rec
		bad.ID = "00000000000000aa"
		edit(&bad)
		if err := r.AddToken(bad); err == nil {
			t.Errorf("%s: got nil error", name)
		}
	}
}

// The registry is replicated state: a snapshot (its JSON) restores a
// registry that decides the same, and two registries given the same
// commands end up identical.
func TestRegistrySnapshotAndDeterminism(t *testing.T) {
	apply := func(r *Registry, tok Token, rec Record) {
		if err := r.AddToken(rec); err != nil {
			t.Fatal(err)
		}
		if err := r.Admit(admission(tok, "lab-a", t0), CertInfo{Serial: "a1", NotAfter: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		r.RemoveNode("lab-b", t0.Add(time.Minute))
	}
	tok, rec, err := NewToken(testFP, time.Hour, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	r1, r2 := NewRegistry(), NewRegistry()
	apply(r1, tok, rec)
	apply(r2, tok, rec)
	j1, _ := json.Marshal(r1)
	j2, _ := json.Marshal(r2)
	if string(j1) != string(j2) {
		t.Fatalf("same commands, different registries:\n%s\n%s", j1, j2)
	}
	var restored Registry
	if err := json.Unmarshal(j1, &restored); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&restored, r1) {
		t.Errorf("snapshot round trip: got %+v, want %+v", restored, *r1)
	}
	if err := restored.CheckJoin(admission(tok, "lab-c", t0)); !errors.Is(err, ErrTokenUsedUp) {
		t.Errorf("restored registry: got %v, want ErrTokenUsedUp", err)
	}
	var empty Registry // a zero registry (e.g. from an old snapshot) works
	if err := empty.AddToken(rec); err != nil {
		t.Fatal(err)
	}
	if err := empty.Admit(admission(tok, "lab-a", t0), CertInfo{Serial: "a1"}); err != nil {
		t.Errorf("zero registry: %v", err)
	}
}

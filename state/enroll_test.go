package state

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
)

// TestEnrollmentCommands: the enrollment commands survive the log's
// encoding, apply the registry's rules (a used-up token refuses and
// changes nothing), a removal denies the node and recovers its jobs, and
// the secrets key is set once.
func TestEnrollmentCommands(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	ca := strings.Repeat("ab", 32)
	tok, rec, err := enroll.NewToken(ca, time.Hour, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	adm := func(node string) EnrollNode {
		return EnrollNode{Admission: enroll.Admission{TokenID: tok.ID, SecretHash: tok.SecretHash(), CA: ca, Node: node, Now: t0.Add(time.Minute)},
			Cert: enroll.CertInfo{Serial: "0a" + node, NotAfter: t0.Add(90 * 24 * time.Hour)}}
	}
	cmds := []Command{
		AddToken{Token: rec}, adm("lab-b"), RenewCert{Node: "lab-b", Cert: enroll.CertInfo{Serial: "0b", NotAfter: t0.Add(100 * 24 * time.Hour)}, At: t0.Add(time.Hour)},
		RevokeToken{ID: tok.ID, At: t0.Add(2 * time.Minute)}, RemoveNode{Node: "lab-b", At: t0.Add(3 * time.Minute)},
		SetSecretsKey{Public: []byte{1, 2, 3}},
	}
	for _, c := range cmds {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Kind(), err)
		}
		back, err := DecodeCommand(b)
		if err != nil || !reflect.DeepEqual(Normalize(back), Normalize(c)) {
			t.Fatalf("%s: round trip gave %#v, %v", c.Kind(), back, err)
		}
	}
	s := New()
	apply := func(c Command) (bool, error) { t.Helper(); return s.Apply(c) }
	if _, err := apply(AddToken{Token: rec}); err != nil {
		t.Fatal(err)
	}
	s.Nodes["lab-b"] = NodeRecord{ID: "lab-b", State: NodeActive, Joined: t0, Admitted: true}
	s.Jobs["j"] = JobRecord{Job: policy.Job{ID: "j", State: policy.JobRunning, Node: "lab-b"}, Spec: JobSpec{Command: []string{"x"}}}
	if ch, err := apply(adm("lab-b")); err != nil || !ch {
		t.Fatalf("first join: %v, changed %v", err, ch)
	}
	if ch, err := apply(adm("lab-b")); err != nil || ch {
		t.Fatalf("the same join again: %v, changed %v (want a no-op)", err, ch)
	}
	before := s.clone()
	if _, err := apply(adm("lab-c")); !errors.Is(err, enroll.ErrTokenUsedUp) {
		t.Fatalf("second node on a one-use token: %v, want ErrTokenUsedUp", err)
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatal("a refused join changed the state")
	}
	if _, err := apply(RemoveNode{Node: "lab-b", At: t0.Add(3 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if ch, err := apply(RemoveNode{Node: "lab-b", At: t0.Add(3 * time.Minute)}); err != nil || ch {
		t.Errorf("the same removal again: %v, changed %v (want a no-op)", err, ch)
	}
	if e, ok := s.Denied("lab-b"); !ok || !e.IssuedBefore.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("deny entry %+v, %v", e, ok)
	}
	if n := s.Nodes["lab-b"]; n.State != NodeLeft || n.Admitted {
		t.Errorf("removed node %+v: want left, not admitted", n)
	}
	if j := s.Jobs["j"]; j.State != policy.JobRecovering || j.Node != "" {
		t.Errorf("the removed node's job is %v on %q, want recovering", j.State, j.Node)
	}
	if _, ok := s.Enrollment.Nodes["lab-b"]; ok {
		t.Error("the removed node is still enrolled")
	}
	if _, err := apply(SetSecretsKey{Public: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(SetSecretsKey{Public: []byte{2}}); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("another secrets key: %v, want ErrInvalidCommand", err)
	}
	if ch, err := apply(SetSecretsKey{Public: []byte{1}}); err != nil || ch {
		t.Errorf("the same secrets key again: %v, changed %v", err, ch)
	}
}

package state

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
)

// The enrollment commands: join tokens (stored hashed), nodes admitted by
// token with their certificates, and removals with the deny list they
// leave. The registry itself is enroll.Registry; these commands are how the
// log changes it, every one with its time inside so that every node
// applies it the same way.

// AddToken stores a join token's record ('token create'); never the
// secret, only its hash. Requester is the admin who asked.
type AddToken struct {
	Token     enroll.Record
	Requester Requester `json:",omitzero"`
}

// RevokeToken revokes a join token at At ('token revoke ID').
type RevokeToken struct {
	ID        string
	At        time.Time
	Requester Requester `json:",omitzero"`
}

// EnrollNode is a join's one commit: it consumes one use of the token and
// records the node with the certificate it was issued, or is refused for
// the reason enroll.Registry.Admit gives (used up, name taken, ...).
type EnrollNode struct {
	Admission enroll.Admission
	Cert      enroll.CertInfo
}

// RenewCert records a node's renewed certificate.
type RenewCert struct {
	Node string
	Cert enroll.CertInfo
	At   time.Time
}

// RemoveNode revokes a node ('node remove NAME'): every certificate issued
// to its name up to At is denied by every node, it leaves the registry
// (a departure, so its jobs are recovered elsewhere), and the name is free
// for a new join with a new token. Requester is the admin who asked.
type RemoveNode struct {
	Node      policy.NodeID
	At        time.Time
	Requester Requester `json:",omitzero"`
}

// SetSecretsKey records the cluster secrets key's public half, once: a
// different key later is refused (secrets sealed to the first would no
// longer open).
type SetSecretsKey struct{ Public []byte }

func (SetSecretsKey) Kind() Kind { return KindSetSecretsKey }

func (c SetSecretsKey) validate() error {
	if len(c.Public) == 0 {
		return invalid("set-secrets-key without a key")
	}
	return nil
}

func (AddToken) Kind() Kind    { return KindAddToken }
func (RevokeToken) Kind() Kind { return KindRevokeToken }
func (EnrollNode) Kind() Kind  { return KindEnrollNode }
func (RenewCert) Kind() Kind   { return KindRenewCert }
func (RemoveNode) Kind() Kind  { return KindRemoveNode }

func (c AddToken) validate() error {
	// enroll.Registry.AddToken checks the record's fields; here only what
	// a decoder must refuse before anything is applied.
	if c.Token.ID == "" || len(c.Token.SecretHash) == 0 {
		return invalid("token without id or secret hash")
	}
	return c.Requester.validate()
}

func (c RevokeToken) validate() error {
	if c.ID == "" || c.At.IsZero() {
		return invalid("revoke-token needs an id and a time")
	}
	return c.Requester.validate()
}

func (c EnrollNode) validate() error {
	a := c.Admission
	if err := pki.ValidNodeName(a.Node); err != nil {
		return invalid("enroll-node: %v", err)
	}
	if a.TokenID == "" || len(a.SecretHash) == 0 || a.CA == "" || a.Now.IsZero() {
		return invalid("enroll-node %s: needs token id, secret hash, CA and time", a.Node)
	}
	if c.Cert.Serial == "" || c.Cert.NotAfter.IsZero() {
		return invalid("enroll-node %s: no certificate", a.Node)
	}
	return nil
}

func (c RenewCert) validate() error {
	if c.Node == "" || c.Cert.Serial == "" || c.At.IsZero() {
		return invalid("renew-cert needs node, serial and time")
	}
	return nil
}

func (c RemoveNode) validate() error {
	if err := pki.ValidNodeName(string(c.Node)); err != nil {
		return invalid("remove-node: %v", err)
	}
	if c.At.IsZero() {
		return invalid("remove-node %s without time", c.Node)
	}
	return c.Requester.validate()
}

// removedReason is what a removed node's registry entry says.
const removedReason = "removed from the cluster ('reclaimnet node remove')"

// applyEnrollment applies the enrollment commands; ok is false for any
// other command.
func applyEnrollment(s *State, cmd Command) (changed, ok bool, err error) {
	reg := &s.Enrollment
	before := cloneRegistry(*reg)
	switch c := cmd.(type) {
	case AddToken:
		err = reg.AddToken(c.Token)
	case RevokeToken:
		err = reg.RevokeToken(c.ID, c.At)
	case EnrollNode:
		err = reg.Admit(c.Admission, c.Cert)
	case RenewCert:
		err = reg.Renewed(c.Node, c.Cert, c.At)
	case RemoveNode:
		reg.RemoveNode(string(c.Node), c.At)
		changed := !registryEqual(before, *reg)
		if n, known := s.Nodes[c.Node]; known && n.State == NodeActive {
			changed = applyDeparture(s, Departure{Node: c.Node, At: c.At, Kind: DepartureEmergency}) || changed
		}
		if n, known := s.Nodes[c.Node]; known && (n.Admitted || n.Refused != removedReason) {
			n.Admitted, n.Refused = false, removedReason
			s.Nodes[c.Node] = n
			changed = true
		}
		return changed, true, nil
	case SetSecretsKey:
		if len(s.SecretsKey) == 0 {
			s.SecretsKey = slices.Clone(c.Public)
			return true, true, nil
		}
		if !bytes.Equal(s.SecretsKey, c.Public) {
			return false, true, invalid("the cluster already has another secrets key")
		}
		return false, true, nil
	default:
		return false, false, nil
	}
	if err != nil {
		s.Enrollment = before // enroll.Registry refuses before it changes anything; keep that promise here too
		return false, true, fmt.Errorf("%s: %w", cmd.Kind(), err)
	}
	return !registryEqual(before, *reg), true, nil
}

// Denied reports the deny-list entry that covers node, if any.
func (s *State) Denied(node policy.NodeID) (pki.DenyEntry, bool) {
	for _, e := range s.Enrollment.Deny {
		if e.Node == string(node) {
			return e, true
		}
	}
	return pki.DenyEntry{}, false
}

func cloneRegistry(r enroll.Registry) enroll.Registry {
	out := enroll.Registry{Deny: slices.Clone(r.Deny)}
	if r.Tokens != nil {
		out.Tokens = make(map[string]enroll.Record, len(r.Tokens))
		for id, t := range r.Tokens {
			t.SecretHash = slices.Clone(t.SecretHash)
			t.Nodes = slices.Clone(t.Nodes)
			out.Tokens[id] = t
		}
	}
	if r.Nodes != nil {
		out.Nodes = maps.Clone(r.Nodes)
	}
	return out
}

func registryEqual(a, b enroll.Registry) bool {
	if len(a.Tokens) != len(b.Tokens) || len(a.Nodes) != len(b.Nodes) || !slices.Equal(a.Deny, b.Deny) {
		return false
	}
	for id, t := range a.Tokens {
		u, ok := b.Tokens[id]
		if !ok || t.Used != u.Used || !t.Revoked.Equal(u.Revoked) || !slices.Equal(t.Nodes, u.Nodes) {
			return false
		}
	}
	for id, n := range a.Nodes {
		if m, ok := b.Nodes[id]; !ok || m.Serial != n.Serial {
			return false
		}
	}
	return true
}

package enroll

import (
	"cmp"
	"crypto/subtle"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
)

// Registry is the enrollment part of the replicated state: the join tokens
// (hashed), the nodes that joined with them, and the deny list. Every method
// takes the time from its caller (the command being applied), so applying
// the same commands in the same order gives the same registry on every
// node; a retried command (same arguments) changes nothing the second time.
// It is not safe for concurrent use: the state machine serialises it.
type Registry struct {
	Tokens map[string]Record     `json:"tokens,omitempty"`
	Nodes  map[string]NodeRecord `json:"nodes,omitempty"`
	Deny   []pki.DenyEntry       `json:"deny,omitempty"`
}

// NodeRecord is a node that joined by token, with its current certificate.
type NodeRecord struct {
	Name     string    `json:"name"`
	Token    string    `json:"token"` // the ID of the token it joined with
	Enrolled time.Time `json:"enrolled"`
	CertInfo
	// Renewed is the last renewal; zero before the first.
	Renewed time.Time `json:"renewed,omitzero"`
}

// CertInfo names an issued certificate.
type CertInfo struct {
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
}

// Admission is one join as the registry judges it: the token's ID and
// secret hash (never the secret, so the command that carries it to the log
// carries nothing a joiner could use), the CA the token names, the node
// name, and the time of the decision.
type Admission struct {
	TokenID    string    `json:"token_id"`
	SecretHash []byte    `json:"secret_hash"`
	CA         string    `json:"ca"`
	Node       string    `json:"node"`
	Now        time.Time `json:"now"`
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{Tokens: map[string]Record{}, Nodes: map[string]NodeRecord{}}
}

// AddToken stores a token record ('token create').
func (r *Registry) AddToken(rec Record) error {
	if err := rec.validate(); err != nil {
		return err
	}
	if have, ok := r.Tokens[rec.ID]; ok {
		if subtle.ConstantTimeCompare(have.SecretHash, rec.SecretHash) == 1 {
			return nil // the same command applied again
		}
		return fmt.Errorf("enroll: token %s already exists", rec.ID)
	}
	rec.SecretHash = slices.Clone(rec.SecretHash)
	rec.Nodes = slices.Clone(rec.Nodes)
	r.tokens()[rec.ID] = rec
	return nil
}

// RevokeToken revokes a token at now ('token revoke ID'); revoking it again
// keeps the first time.
func (r *Registry) RevokeToken(id string, now time.Time) error {
	rec, ok := r.Tokens[id]
	if !ok {
		return fmt.Errorf("%w: %q ('reclaimnet token list' shows the IDs)", ErrUnknownToken, id)
	}
	if rec.Revoked.IsZero() {
		rec.Revoked = now
		r.Tokens[id] = rec
	}
	return nil
}

// ListTokens returns the token records, oldest first ('token list'; each
// record's State says where it stands).
func (r *Registry) ListTokens() []Record {
	out := slices.Collect(maps.Values(r.Tokens))
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// CheckJoin says whether a would be admitted, changing nothing: the cheap
// refusal a node gives from its own copy of the state before asking the
// leader to commit anything. The checks run in this order, so a caller
// without the secret learns nothing about a token but that it is wrong:
// the token and its secret, its cluster, revoked, expired, used up, then
// the node name.
func (r *Registry) CheckJoin(a Admission) error {
	rec, ok := r.Tokens[a.TokenID]
	if !ok || subtle.ConstantTimeCompare(rec.SecretHash, a.SecretHash) != 1 {
		return fmt.Errorf("%w: this cluster made no such token (check it was copied whole, or create one with 'reclaimnet token create')", ErrWrongToken)
	}
	if rec.CA != a.CA {
		return fmt.Errorf("%w: token %s was made for the cluster of CA %s, not %s", ErrForeignCluster, rec.ID, short(rec.CA), short(a.CA))
	}
	if err := rec.usable(a.Now); err != nil {
		return err
	}
	if n, ok := r.Nodes[a.Node]; ok {
		return fmt.Errorf("%w: %q joined at %s; choose another name, or remove that node first with 'reclaimnet node remove %s'",
			ErrNameTaken, a.Node, stamp(n.Enrolled), a.Node)
	}
	return nil
}

// Admit checks a as CheckJoin does and, if it passes, consumes one use of
// the token and records the node with its certificate: the one atomic step
// of a join. Applied again for the same node and certificate, it succeeds
// without consuming another use.
func (r *Registry) Admit(a Admission, cert CertInfo) error {
	if n, ok := r.Nodes[a.Node]; ok && n.Token == a.TokenID && n.Serial == cert.Serial {
		return nil
	}
	if err := r.CheckJoin(a); err != nil {
		return err
	}
	rec := r.Tokens[a.TokenID]
	rec.Used++
	rec.Nodes = append(slices.Clone(rec.Nodes), a.Node)
	r.Tokens[a.TokenID] = rec
	r.nodes()[a.Node] = NodeRecord{Name: a.Node, Token: a.TokenID, Enrolled: a.Now, CertInfo: cert}
	return nil
}

// Renewed records node's renewed certificate. A node that did not join by
// token (or was removed) is refused with ErrNotEnrolled.
func (r *Registry) Renewed(node string, cert CertInfo, now time.Time) error {
	n, ok := r.Nodes[node]
	if !ok {
		return fmt.Errorf("%w: %q did not join with a token (or was removed); renew its certificate with the PKI that issued it, or join it again with a token", ErrNotEnrolled, node)
	}
	if n.Serial == cert.Serial {
		return nil
	}
	n.CertInfo, n.Renewed = cert, now
	r.Nodes[node] = n
	return nil
}

// RemoveNode forgets node and denies every certificate issued to its name
// up to now ('node remove NAME'): the node is refused by every node from
// then on, and the name is free for a fresh join with a new token. It
// returns the deny entry, which is also in r.Deny.
func (r *Registry) RemoveNode(node string, now time.Time) pki.DenyEntry {
	delete(r.Nodes, node)
	e := pki.DenyEntry{Node: node, IssuedBefore: now, Reason: "removed from the cluster; join again with a new token"}
	for i, have := range r.Deny {
		if have.Node == node {
			if have.IssuedBefore.Before(now) && !have.IssuedBefore.IsZero() {
				r.Deny[i] = e
			}
			return r.Deny[i]
		}
	}
	r.Deny = append(r.Deny, e)
	return e
}

func (r *Registry) tokens() map[string]Record {
	if r.Tokens == nil {
		r.Tokens = map[string]Record{}
	}
	return r.Tokens
}

func (r *Registry) nodes() map[string]NodeRecord {
	if r.Nodes == nil {
		r.Nodes = map[string]NodeRecord{}
	}
	return r.Nodes
}

// short shortens a fingerprint for messages: sha256:<first 16 digits>.
func short(fp string) string {
	if len(fp) > 16 {
		fp = fp[:16]
	}
	return "sha256:" + fp
}

package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrRevoked: a certificate is on the cluster's deny list.
var ErrRevoked = errors.New("pki: certificate revoked")

// DenyEntry revokes certificates, by serial or by node name. It is what the
// replicated state records when an admin removes a node or revokes one
// certificate.
type DenyEntry struct {
	// Serial revokes the one certificate with this serial ([Serial]'s hex).
	Serial string `json:"serial,omitempty"`
	// Node revokes the certificates of this node name issued at or before
	// IssuedBefore (all of them if IssuedBefore is zero), so a removed node's
	// certificates stay refused while the name can join again with a token
	// and a fresh certificate.
	Node         string    `json:"node,omitempty"`
	IssuedBefore time.Time `json:"issued_before,omitzero"`
	// Reason is shown to the refused peer's operator and in logs.
	Reason string `json:"reason,omitempty"`
}

// DenyList is the set of revoked certificates a node's TLS configurations
// consult on every handshake. The replicated state replaces its contents
// when the list changes; it is safe for concurrent use.
type DenyList struct {
	mu      sync.RWMutex
	serials map[string]DenyEntry // guarded by mu
	nodes   map[string]DenyEntry // guarded by mu
}

// NewDenyList returns a deny list holding entries.
func NewDenyList(entries ...DenyEntry) *DenyList {
	d := &DenyList{}
	d.Replace(entries)
	return d
}

// Replace makes entries the whole list. Of two entries for one node name,
// the later IssuedBefore (zero counting as latest) wins.
func (d *DenyList) Replace(entries []DenyEntry) {
	serials, nodes := map[string]DenyEntry{}, map[string]DenyEntry{}
	for _, e := range entries {
		if e.Serial != "" {
			serials[strings.ToLower(e.Serial)] = e
		}
		if e.Node != "" {
			if have, ok := nodes[e.Node]; !ok || wider(e, have) {
				nodes[e.Node] = e
			}
		}
	}
	d.mu.Lock()
	d.serials, d.nodes = serials, nodes
	d.mu.Unlock()
}

// Entries returns the list's entries, serials first, each group sorted.
func (d *DenyList) Entries() []DenyEntry {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []DenyEntry
	for _, s := range slices.Sorted(maps.Keys(d.serials)) {
		out = append(out, d.serials[s])
	}
	for _, n := range slices.Sorted(maps.Keys(d.nodes)) {
		out = append(out, d.nodes[n])
	}
	return out
}

// Check returns an error wrapping ErrRevoked if cert is denied: its serial
// is listed, or its node name is, with the certificate issued at or before
// the entry's IssuedBefore. A certificate's issue time is its NotBefore plus
// the clock-skew allowance the CA backdates it by.
func (d *DenyList) Check(cert *x509.Certificate) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if e, ok := d.serials[Serial(cert)]; ok {
		return fmt.Errorf("%w: certificate %s of node %q%s", ErrRevoked, Serial(cert), cert.Subject.CommonName, reason(e))
	}
	e, ok := d.nodes[cert.Subject.CommonName]
	if !ok {
		return nil
	}
	if e.IssuedBefore.IsZero() {
		return fmt.Errorf("%w: node %q is denied%s", ErrRevoked, e.Node, reason(e))
	}
	if issued := cert.NotBefore.Add(clockSkew); !issued.After(e.IssuedBefore) {
		return fmt.Errorf("%w: node %q was removed at %s and this certificate was issued at %s%s",
			ErrRevoked, e.Node, e.IssuedBefore.UTC().Format(time.RFC3339), issued.UTC().Format(time.RFC3339), reason(e))
	}
	return nil
}

// wider reports whether node entry a denies more certificates than b.
func wider(a, b DenyEntry) bool {
	if b.IssuedBefore.IsZero() {
		return false
	}
	return a.IssuedBefore.IsZero() || a.IssuedBefore.After(b.IssuedBefore)
}

func reason(e DenyEntry) string {
	if e.Reason == "" {
		return ""
	}
	return " (" + e.Reason + ")"
}

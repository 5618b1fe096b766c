package raft

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Admission: the leader verifies a member's certificate over mutual TLS
// before the member may receive work, hold replicas or vote. Gossip needs
// only the gossip key, which leaks more easily than a node's private key;
// the handshake proves the member holds a key the cluster CA certified for
// its name, not on the deny list. The verdict is recorded in the node's
// registry entry (state.NodeRecord.Admitted, Refused) so every node shows
// it and the policy sees only admitted nodes.

// admissionRecheck is how long a refused member waits before the leader
// tries its certificate again (a fixed certificate is noticed quickly).
const admissionRecheck = 5 * time.Second

// admissionTimeout bounds one verification handshake.
const admissionTimeout = 3 * time.Second

// admissionCheck is the leader's last verdict on one member incarnation.
type admissionCheck struct {
	addr    string
	since   time.Time
	ok      bool
	reason  string
	checked time.Time
}

// admit returns whether m is admitted and, if not, why; it dials the
// member's coordinator port unless a verdict for this incarnation and
// address is fresh (a success holds until the member changes or the deny
// list does: revocations reset the cache).
func (c *Coordinator) admit(m Member, now time.Time) (bool, string) {
	if m.ID == c.cfg.NodeID {
		return true, ""
	}
	if m.RaftAddr == "" {
		return false, "gossip gives no coordinator address to verify its certificate at"
	}
	c.mu.Lock()
	prev, seen := c.admissions[m.ID]
	c.mu.Unlock()
	if seen && prev.addr == m.RaftAddr && prev.since.Equal(m.Since) && (prev.ok || now.Sub(prev.checked) < admissionRecheck) {
		return prev.ok, prev.reason
	}
	err := c.verifyPeer(m.ID, m.RaftAddr)
	v := admissionCheck{addr: m.RaftAddr, since: m.Since, ok: err == nil, checked: now}
	if err != nil {
		v.reason = err.Error()
		if !seen || prev.reason != v.reason {
			c.logger.Warn("member refused: its certificate did not verify", "member", m.ID, "addr", m.RaftAddr, "err", err)
		}
	}
	c.mu.Lock()
	c.admissions[m.ID] = v
	c.mu.Unlock()
	return v.ok, v.reason
}

// verifyPeer completes a mutual-TLS handshake with the coordinator at addr
// that accepts only a certificate of the cluster CA for node, not denied.
func (c *Coordinator) verifyPeer(node policy.NodeID, addr string) error {
	raw, err := c.cfg.Dial("tcp", addr, admissionTimeout)
	if err != nil {
		return fmt.Errorf("cannot reach its coordinator port %s to verify its certificate: %v", addr, err)
	}
	defer raw.Close()
	conn := tls.Client(raw, c.tlsSource().ClientTLS(string(node), alpnRaft))
	_ = conn.SetDeadline(time.Now().Add(admissionTimeout))
	if err := conn.Handshake(); err != nil {
		return fmt.Errorf("certificate not verified over mutual TLS: %v", err)
	}
	return nil
}

// forgetAdmissions drops every cached verdict, so the next reconcile
// verifies each member again (after a change to the deny list).
func (c *Coordinator) forgetAdmissions() {
	c.mu.Lock()
	clear(c.admissions)
	c.mu.Unlock()
}

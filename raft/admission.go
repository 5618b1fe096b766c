package raft

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
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

// admitMembers returns the alive and suspect members admitted and those
// refused, with the reason, verifying the ones that need it in parallel.
func (c *Coordinator) admitMembers(members []Member, st *state.State, inConfig map[policy.NodeID]bool, now time.Time) (admitted, refused map[policy.NodeID]string) {
	admitted, refused = map[policy.NodeID]string{}, map[policy.NodeID]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		if m.Status != MemberAlive && m.Status != MemberSuspect {
			continue
		}
		wg.Go(func() {
			ok, why := c.admit(m, st, inConfig[m.ID], now)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				admitted[m.ID] = ""
			} else {
				refused[m.ID] = why
			}
		})
	}
	wg.Wait()
	return admitted, refused
}

// admit returns whether m is admitted and, if not, why. It dials the
// member's coordinator port unless a verdict for this incarnation and
// address stands: a fresh one of this leader's (a success holds until
// the member or the deny list changes), or the admission the registry
// records, which a new leader keeps while no removal names the node. A
// member verified before, or in the Raft configuration at this address
// (only admitted members are added), that cannot be reached now keeps
// its admission: a partition or a slow handshake is failure detection's
// business, not admission's; only a certificate that fails verification
// takes an admission back.
func (c *Coordinator) admit(m Member, st *state.State, inConfig bool, now time.Time) (bool, string) {
	if m.ID == c.cfg.NodeID {
		return true, ""
	}
	if m.RaftAddr == "" {
		return false, "gossip gives no coordinator address to verify its certificate at"
	}
	rec, known := st.Nodes[m.ID]
	_, denied := st.Denied(m.ID)
	recorded := known && rec.Admitted && rec.State == state.NodeActive && rec.RaftAddr == m.RaftAddr &&
		!m.Since.UTC().Round(0).After(rec.Joined) && !denied // the same incarnation: Joined only moves forward
	c.mu.Lock()
	prev, seen := c.admissions[m.ID]
	c.mu.Unlock()
	if seen && prev.addr == m.RaftAddr && prev.since.Equal(m.Since) && (prev.ok || now.Sub(prev.checked) < admissionRecheck) {
		return prev.ok, prev.reason
	}
	if !seen && recorded {
		return true, ""
	}
	unreachable, err := c.verifyPeer(m.ID, m.RaftAddr)
	wasOK := (seen && prev.ok && prev.addr == m.RaftAddr && prev.since.Equal(m.Since)) || recorded || inConfig
	if unreachable && wasOK {
		return true, "" // verified before; unreachable now
	}
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
// unreachable reports a failure that says nothing about the member's
// certificate (no connection, a timeout, a reset, the member refusing
// this leader's certificate); otherwise err is the verdict on it.
func (c *Coordinator) verifyPeer(node policy.NodeID, addr string) (unreachable bool, err error) {
	raw, err := c.cfg.Dial("tcp", addr, admissionTimeout)
	if err != nil {
		return true, fmt.Errorf("cannot reach its coordinator port %s to verify its certificate: %v", addr, err)
	}
	defer raw.Close()
	cfg := c.tlsSource().ClientTLS(string(node), alpnRaft)
	check := cfg.VerifyPeerCertificate
	var verdict error
	cfg.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
		verdict = check(raw, chains)
		return verdict
	}
	conn := tls.Client(raw, cfg)
	_ = conn.SetDeadline(time.Now().Add(admissionTimeout))
	if err := conn.Handshake(); err != nil {
		if verdict != nil {
			return false, fmt.Errorf("certificate not verified over mutual TLS: %v", verdict)
		}
		return true, fmt.Errorf("no TLS handshake with its coordinator port %s: %v", addr, err)
	}
	return false, nil
}

// forgetAdmissions drops every cached verdict, so the next reconcile
// verifies each member again (after a change to the deny list).
func (c *Coordinator) forgetAdmissions() {
	c.mu.Lock()
	clear(c.admissions)
	c.mu.Unlock()
}

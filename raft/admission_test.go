package raft

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// TestAdmission: the leader admits a member only after a mutual-TLS
// handshake with the member's coordinator port; a member nobody answers
// for is refused with the reason and kept out of the configuration; an
// admitted member that stops answering (a partition) keeps its
// admission.
func TestAdmission(t *testing.T) {
	tc := newTestCluster(t, 3, localConfig(), false)
	l := tc.waitConfigured(3, 30*time.Second)
	for id := range tc.nodes {
		wait.For(t, 10*time.Second, string(id)+" admitted", func() bool {
			n, ok := l.Store().Node(id)
			return ok && n.Admitted && n.Refused == ""
		})
	}
	// A gossip member with no coordinator behind its address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	tc.gossip.set(Member{ID: "ghost", RaftAddr: dead, Building: "b1", GPUs: 8, Status: MemberAlive, Since: time.Now()})
	wait.For(t, 15*time.Second, "ghost refused", func() bool {
		n, ok := l.Store().Node("ghost")
		return ok && !n.Admitted && strings.Contains(n.Refused, "cannot reach")
	})
	servers, _ := l.Servers()
	for _, s := range servers {
		if s.ID == "ghost" {
			t.Fatal("the ghost is in the Raft configuration")
		}
	}
	// A follower's coordinator stops, gossip still calls it alive: its
	// admission stands, on this leader and on the next.
	var follower policy.NodeID
	for id, c := range tc.nodes {
		if c != l {
			follower = id
			break
		}
	}
	if err := tc.nodes[follower].Shutdown(); err != nil {
		t.Fatal(err)
	}
	delete(tc.nodes, follower)
	l.forgetAdmissions() // as after a change to the deny list
	ticks := l.Ticks()
	wait.For(t, 10*time.Second, "more ticks", func() bool { return l.Ticks() >= ticks+20 })
	if n, _ := l.Store().Node(follower); !n.Admitted {
		t.Errorf("unreachable %s lost its admission: %+v", follower, n)
	}
	if n, _ := l.Store().Node("ghost"); n.Admitted || n.State != state.NodeActive {
		t.Errorf("ghost: %+v", n)
	}
}

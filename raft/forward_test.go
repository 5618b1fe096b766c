package raft

import (
	"errors"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// TestCheckForwarderRules: the leader's verdict on each kind of forwarded
// command, from a voter and from a non-voter, for the sender's own users
// and nodes and for others'.
func TestCheckForwarderRules(t *testing.T) {
	st := state.New()
	st.Jobs["bobs"] = state.JobRecord{Job: policy.Job{ID: "bobs"}, Owner: "bob@lab-b"}
	now := time.Now()
	voter, member := forwarder{Node: "lab-a", Voter: true}, forwarder{Node: "lab-m"}
	cancel := func(user string, admin bool) state.CancelJob {
		return state.CancelJob{Job: "bobs", At: now, Requester: state.Requester{User: user, Admin: admin}}
	}
	job := func(owner string) state.SubmitJob {
		return state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "new"}, Spec: state.JobSpec{Command: []string{"x"}}, Owner: owner}}
	}
	remove := func(user string, admin bool) state.RemoveNode {
		return state.RemoveNode{Node: "lab-b", At: now, Requester: state.Requester{User: user, Admin: admin}}
	}
	for _, c := range []struct {
		name string
		from forwarder
		cmd  state.Command
		ok   bool
	}{
		{"submission for its own user", member, job("alice@lab-m"), true},
		{"submission for another node's user", member, job("bob@lab-b"), false},
		{"submission without an owner", member, job(""), false},
		{"owner's cancel from the owner's node", forwarder{Node: "lab-b"}, cancel("bob@lab-b", false), true},
		{"owner's name from another node", member, cancel("bob@lab-b", false), false},
		{"another user's cancel", member, cancel("carol@lab-m", false), false},
		{"admin's cancel from a voter", voter, cancel("root@lab-a", true), true},
		{"admin's cancel from a non-voter", member, cancel("root@lab-m", true), false},
		{"voter speaking for another node's admin", voter, cancel("root@lab-m", true), false},
		{"cancel naming no one", voter, state.CancelJob{Job: "bobs"}, false},
		{"cancel of an unknown job (the state refuses it)", member, state.CancelJob{Job: "nope", Requester: state.Requester{User: "x@lab-m"}}, true},
		{"removal by a voter's admin", voter, remove("root@lab-a", true), true},
		{"removal by a voter's non-admin", voter, remove("alice@lab-a", false), false},
		{"removal by a non-voter's admin", member, remove("root@lab-m", true), false},
		{"token revoke by a non-voter's admin", member, state.RevokeToken{ID: "t", At: now, Requester: state.Requester{User: "root@lab-m", Admin: true}}, false},
		{"token revoke by a voter's admin", voter, state.RevokeToken{ID: "t", At: now, Requester: state.Requester{User: "root@lab-a", Admin: true}}, true},
		{"hand-off from its host", member, state.MoveJob{Job: "bobs", From: "lab-m", To: "lab-a"}, true},
		{"hand-off of another host's job", member, state.MoveJob{Job: "bobs", From: "lab-b", To: "lab-m"}, false},
		{"renewal commit from a voter", voter, state.RenewCert{Node: "lab-m", At: now}, true},
		{"renewal commit from a non-voter", member, state.RenewCert{Node: "lab-m", At: now}, false},
		{"join commit from a non-voter", member, state.EnrollNode{}, false},
		{"its own reclaim", member, state.CancelReclaim{Node: "lab-m"}, true},
		{"another node's reclaim, even from a voter", voter, state.CancelReclaim{Node: "lab-b"}, false},
		{"decisions, even from a voter", voter, state.SetDecisions{}, false},
		{"a replica report", member, state.ReplicaComplete{Job: "bobs", Holder: "lab-b"}, true},
	} {
		err := checkForwarder(c.from, st, c.cmd)
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrForbidden) {
			t.Errorf("%s (%s from %s, voter %v): got %v, want allowed %v", c.name, c.cmd.Kind(), c.from.Node, c.from.Voter, err, c.ok)
		}
	}
}

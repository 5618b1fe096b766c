package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// TestLeaderAuthorisesForwardedCommands: a compromised member (a real
// agent, certificate of the cluster's CA, a non-voter) forges forwarded
// commands with its own coordinator, over the real mutual TLS: a cancel
// of a voter's user's job in that user's name, in the name of the
// leader's root, in its own root's name claiming admin, or naming no one;
// a node removal and a token claiming admin; a job submitted in another
// node's user's name. The leader refuses every one with ErrForbidden and
// the job keeps running. The same member's root cancelling through its
// own socket is told why (the leader's refusal travels); a job of its own
// user it may cancel; root on a voter, an admin, cancels the other job.
func TestLeaderAuthorisesForwardedCommands(t *testing.T) {
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 } // a busy test machine is not a busy lab machine
	for i := range 4 {
		cfg := c.config(fmt.Sprintf("node-%02d", i))
		cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
		c.start(cfg)
	}
	c.waitConfig(4, 3, 60*time.Second)
	servers, err := c.leader().agent.Coordinator().Servers()
	if err != nil {
		t.Fatal(err)
	}
	var attacker, victim *testNode
	for _, n := range c.nodes {
		for _, s := range servers {
			if string(s.ID) != n.info.Node {
				continue
			}
			switch {
			case s.Role != state.RoleVoter:
				attacker = n
			case !s.Leader && victim == nil:
				victim = n
			}
		}
	}
	leader := c.leader()
	if attacker == nil || victim == nil || leader == nil {
		t.Fatalf("want a non-voter, a follower voter and a leader: %+v", servers)
	}
	script := c.writeScript("sleep.sh", "#!/bin/sh\nsleep 300\n")
	submit(t, victim, localapi.JobRequest{Name: "victims", Command: []string{"/bin/sh", script}, GPUs: 1})
	submit(t, attacker, localapi.JobRequest{Name: "attackers", Command: []string{"/bin/sh", script}, GPUs: 1})
	running := func(id policy.JobID) bool {
		j, ok := leader.agent.Coordinator().Store().Job(id)
		return ok && j.State == policy.JobRunning
	}
	wait.For(t, 60*time.Second, "both jobs running", func() bool { return running("victims") && running("attackers") })
	owner := "root@" + victim.info.Node
	if j, _ := leader.agent.Coordinator().Store().Job("victims"); j.Owner != owner {
		t.Fatalf("victim's job owner %q, want %q", j.Owner, owner)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC()
	own := "root@" + attacker.info.Node
	tok, rec, err := enroll.NewToken(strings.Repeat("0", 64), time.Hour, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	forged := []struct {
		name string
		cmd  state.Command
		want string
	}{
		{"cancel as the job's owner", state.CancelJob{Job: "victims", By: owner, At: now, Requester: state.Requester{User: owner}}, "speaks for its own users only"},
		{"cancel as the leader's root, admin", state.CancelJob{Job: "victims", At: now, Requester: state.Requester{User: "root@" + leader.info.Node, Admin: true}}, "speaks for its own users only"},
		{"cancel as its own root, admin", state.CancelJob{Job: "victims", At: now, Requester: state.Requester{User: own, Admin: true}}, "not a voter"},
		{"cancel naming no one", state.CancelJob{Job: "victims", At: now}, "names no requesting user"},
		{"node removal as its own root, admin", state.RemoveNode{Node: policy.NodeID(victim.info.Node), At: now, Requester: state.Requester{User: own, Admin: true}}, "not a voter"},
		{"token as its own root, admin", state.AddToken{Token: rec, Requester: state.Requester{User: own, Admin: true}}, "not a voter"},
		{"submission for the victim's user", state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "planted", GPUs: 1},
			Spec: state.JobSpec{Command: []string{"/bin/true"}}, Owner: owner}}, "speaks for its own users only"},
	}
	for _, f := range forged {
		_, err := attacker.agent.Coordinator().Submit(ctx, f.cmd)
		if !errors.Is(err, raft.ErrForbidden) || !strings.Contains(err.Error(), f.want) {
			t.Errorf("forged %s: got %v, want ErrForbidden saying %q", f.name, err, f.want)
		}
	}
	st := leader.agent.Coordinator().State()
	if j := st.Jobs["victims"]; j.State != policy.JobRunning || !j.End.At.IsZero() {
		t.Errorf("victim's job after the forgeries: %v, ended %+v", j.State, j.End)
	}
	if _, ok := st.Nodes[policy.NodeID(victim.info.Node)]; !ok {
		t.Error("the forged removal removed the victim's node")
	}
	if _, ok := st.Enrollment.Tokens[tok.ID]; ok {
		t.Error("the forged token was stored")
	}
	if _, ok := st.Jobs["planted"]; ok {
		t.Error("the forged submission was stored")
	}

	// Through its own socket, the member's root (an admin there, but not
	// on a voter) hears the leader's refusal; its own user's job it may
	// cancel.
	resp := call(t, attacker, localapi.Request{Op: localapi.OpCancel, JobID: "victims"})
	if resp.Kind != localapi.KindForbidden || !strings.Contains(resp.Error, "not a voter") {
		t.Errorf("cancel of the victim's job on the non-voter: %+v", resp)
	}
	if !running("victims") {
		t.Error("the victim's job stopped running after the non-voter's cancel")
	}
	if resp := call(t, attacker, localapi.Request{Op: localapi.OpCancel, JobID: "attackers"}); resp.Error != "" {
		t.Errorf("the non-voter's root cancelling its own job: %+v", resp)
	}
	// Root on a voter is a cluster admin the leader takes at its word.
	third := victim
	for _, n := range c.nodes {
		if n != attacker && n != victim && n != leader {
			third = n
		}
	}
	if resp := call(t, third, localapi.Request{Op: localapi.OpCancel, JobID: "victims"}); resp.Error != "" {
		t.Fatalf("cancel by root on voter %s: %+v", third.info.Node, resp)
	}
	wait.For(t, 30*time.Second, "the victim's job cancelled", func() bool {
		j, _ := leader.agent.Coordinator().Store().Job("victims")
		return j.State == policy.JobDone
	})
}

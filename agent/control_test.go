package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// A run request with a signal or grace no node could use is refused
// before anything is submitted (the coordinator is nil here: reaching it
// would panic).
func TestRunRejectsBadSignalAndGrace(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		jr   localapi.JobRequest
		want string
	}{
		{"signal KILL", localapi.JobRequest{Signal: "KILL"}, `checkpoint signal "KILL"`},
		{"signal TERM", localapi.JobRequest{Signal: "SIGTERM"}, "want one of"},
		{"signal number", localapi.JobRequest{Signal: "10"}, "want one of"},
		{"negative grace", localapi.JobRequest{Grace: -time.Second}, "stop grace"},
		{"grace over an hour", localapi.JobRequest{Grace: 2 * time.Hour}, "at most 1h"},
		{"no replicas", localapi.JobRequest{Replicas: -1}, "replicas -1: want 1 to 8"},
		{"too many replicas", localapi.JobRequest{Replicas: 9}, "replicas 9: want 1 to 8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jr := tc.jr
			jr.Name, jr.Command = "j", []string{"true"}
			resp := (&Agent{}).runJob(context.Background(), nil, &jr, caller{Name: "root"})
			if resp.Kind != localapi.KindBadRequest || !strings.Contains(resp.Error, tc.want) {
				t.Fatalf("got kind %q error %q, want %q mentioning %q", resp.Kind, resp.Error, localapi.KindBadRequest, tc.want)
			}
		})
	}
}

// A storage node is never lent: both kinds of reclaim are refused with a
// clear error before the reclaim flow sees them (it is nil here).
func TestStorageNodeRefusesReclaim(t *testing.T) {
	t.Parallel()
	a := &Agent{cfg: Config{Role: RoleStorage}}
	for _, op := range []string{localapi.OpReclaim, localapi.OpReclaimNow, localapi.OpLend} {
		resp := a.control(localapi.Request{Op: op}, caller{UID: 0, Name: "root"})
		if resp.Kind != localapi.KindBadRequest || !strings.Contains(resp.Error, "storage node") {
			t.Errorf("%s on a storage node: kind %q error %q, want a bad request naming the storage role", op, resp.Kind, resp.Error)
		}
	}
}

// jobs marks a job whose interval floor is above its loss budget's
// ceiling, and not one without a budget or within it.
func TestJobInfosBudgetUnmet(t *testing.T) {
	t.Parallel()
	st := state.New()
	for _, id := range []policy.JobID{"big", "fine", "nobudget"} {
		st.Jobs[id] = state.JobRecord{Job: policy.Job{ID: id, State: policy.JobRunning}}
	}
	st.Decisions.Jobs = []policy.JobDecision{
		{Job: "big", Floor: 83 * time.Second, Ceiling: 16 * time.Second},
		{Job: "fine", Floor: 5 * time.Second, Ceiling: 16 * time.Second},
		{Job: "nobudget", Floor: 83 * time.Second},
	}
	for _, ji := range jobInfos(st) {
		if ji.BudgetUnmet != (ji.ID == "big") {
			t.Errorf("%s: budget unmet %v, want %v", ji.ID, ji.BudgetUnmet, ji.ID == "big")
		}
	}
}

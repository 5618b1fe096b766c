package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
)

// A run request with a signal or grace no node could use is refused
// before anything is submitted (the coordinator is nil here: reaching it
// would panic).
func TestRunRejectsBadSignalAndGrace(t *testing.T) {
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

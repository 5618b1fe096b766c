package campus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// TestCampusLendingWindowEnds: one machine is lent by its owner's lending
// window, which ends a few minutes into the run while the machine runs a
// job. Its own agent announces the reclaim --lend-lead before the end
// ("lending window ends HH:MM"), through the same path as 'reclaim
// --notice'; the job hands off within that notice with no work lost (it
// resumes elsewhere from the final checkpoint written here); the agent
// stays up, reclaimed, and the machine is not chosen again (out of the
// cluster, no job placed there, lendable again only when its next window
// opens, a day later).
func TestCampusLendingWindowEnds(t *testing.T) {
	t.Parallel()
	requireScenarios(t)
	if testing.Short() {
		t.Skip("campus in a box: 8 agents in namespaces, minutes")
	}
	const (
		node = "a2" // placement fills a1 then a2: a2 runs the third job
		lead = 20 * time.Second
	)
	// The window opened a minute ago and ends on the first minute boundary
	// at least two minutes away (windows are whole minutes): time for the
	// box to start and place jobs (15 to 30 s beside another box; the
	// check below fails the test if less than the lead and 10 s are left
	// then), little time spent idle.
	now := time.Now().UTC()
	start := now.Truncate(time.Minute).Add(-time.Minute)
	end := now.Add(2 * time.Minute).Truncate(time.Minute).Add(time.Minute)
	window := start.Format("15:04") + "-" + end.Format("15:04")
	b := startBoxWith(t, "p1,p2,p3", 3, false, func(cfg *AgentsConfig) {
		// The leader keeps a node whose lending ends soon out of P2 only
		// for the last few seconds: the window is minutes long here.
		cfg.ExtraArgs = append(cfg.ExtraArgs, "--lent-ahead", "5s")
		cfg.NodeArgs = map[string][]string{node: {"--lend-window", window, "--lend-tz", "UTC",
			"--lend-lead", lead.String(), "--on-reclaim", "stay", "--owner-check", "1s"}}
	})
	ctx := context.Background()
	b.waitCommitted(3*time.Minute, 1)
	// More jobs until one runs on the machine whose window ends.
	for i := 1; len(b.jobsOn(node)) == 0; i++ {
		if i > 6 {
			t.Fatalf("no job placed on %s after %d extra jobs", node, i-1)
		}
		b.submitSynth(b.a.Names()[0], fmt.Sprintf("lw%d", i))
		b.waitCommitted(2*time.Minute, 1)
	}
	jobs := b.jobsOn(node)
	if time.Until(end) < lead+10*time.Second {
		t.Fatalf("the box took too long to start and place a job on %s: its window ends %v, in %v", node, end, time.Until(end))
	}
	t.Logf("window-end: %s runs %v %v after the start; its window %s (UTC) ends at %s, in %v", node, jobs, time.Since(now).Round(time.Millisecond),
		window, end.Format("15:04:05"), time.Until(end).Round(time.Millisecond))

	var st localapi.ReclaimStatus
	wait.ForWhy(t, time.Until(end), "the planned reclaim of "+node, func() (bool, string) {
		var err error
		st, err = b.reclaimStatus(node)
		if err != nil {
			return false, err.Error()
		}
		return st.Active, "none yet"
	})
	t0 := st.Announced
	if !st.Deadline.Equal(end) || st.Emergency {
		t.Errorf("window-end: reclaim deadline %v (emergency %v), want the window's end %v", st.Deadline, st.Emergency, end)
	}
	if notice := st.Deadline.Sub(st.Announced); notice > lead || notice < lead-2*time.Second {
		t.Errorf("window-end: notice %v, want the lead %v (less at most a check)", notice, lead)
	}
	t.Logf("window-end: reclaim announced at %s, deadline %s", t0.Format("15:04:05.000"), st.Deadline.Format("15:04:05.000"))

	wait.ForWhy(t, time.Until(end)+60*time.Second, node+" reclaimed, out of the cluster", func() (bool, string) {
		st, err := b.reclaimStatus(node)
		if err != nil {
			return false, err.Error()
		}
		return st.Reclaimed, "not yet"
	})
	if !b.a.Running(node) {
		t.Fatalf("window-end: %s's agent exited; with --on-reclaim stay it stays up", node)
	}
	if left := time.Now(); left.Before(end) {
		t.Errorf("window-end: %s left at %v, before its window's end %v", node, left, end)
	}
	b.checkScheduled("window-end", node, jobs, t0, end)
	for _, job := range jobs {
		b.checkNoFreshStart(job)
	}
	rs, _ := b.reclaimStatus(node)
	if rs.Report == nil || rs.Report.Reason != "lending window ends "+end.Format("15:04") {
		t.Errorf("window-end: owner's report %+v: want the reason %q", rs.Report, "lending window ends "+end.Format("15:04"))
	}

	// Not chosen again: out of the cluster and lendable only when the next
	// window opens, a day later.
	out, err := b.a.CLI(ctx, node, "lend", "--status", "--json")
	if err != nil {
		t.Fatalf("window-end: lend --status: %v", err)
	}
	var ls struct {
		State    string `json:"state"`
		NextLend *struct {
			At time.Time `json:"at"`
		} `json:"next_lend"`
	}
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		t.Fatalf("window-end: lend --status --json: %v: %s", err, out)
	}
	if next := start.AddDate(0, 0, 1); ls.State != "outside window" || ls.NextLend == nil || !ls.NextLend.At.Equal(next) {
		t.Errorf("window-end: lend --status %s; want outside window, lendable again at %v", strings.TrimSpace(out), next)
	}
	time.Sleep(10 * time.Second)
	st2 := b.h.status()
	for _, j := range st2.Jobs {
		if string(j.Node) == node {
			t.Errorf("window-end: job %s placed on %s after its window ended", j.ID, node)
		}
	}
	for _, m := range st2.Cluster.Members {
		if string(m.ID) == node && (m.State == "alive" || m.State == "suspect") {
			t.Errorf("window-end: %s is %s in the cluster after its window ended", node, m.State)
		}
	}
	// The page takes a departed node's lending state from the history (its
	// owner's report), never from its last gossip ("reclaiming" as the
	// window ended), and keeps showing its windows, whether gossip still
	// lists the node or has forgotten it.
	wait.ForWhy(t, 20*time.Second, "the page shows "+node+" outside its window or reclaimed, with its windows", func() (bool, string) {
		for _, m := range b.h.status().Cluster.Members {
			if string(m.ID) != node {
				continue
			}
			if m.Lending == nil || !slices.Contains([]string{"outside window", "reclaimed"}, m.Lending.State) || m.Lending.Windows == "" {
				return false, fmt.Sprintf("lending %+v", m.Lending)
			}
			return true, ""
		}
		return false, node + " not on the page"
	})
	b.logFigures()
}

package campus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/web"
)

// TestCampusFiveOfEightNow is the scenario "five of eight nodes reclaimed
// at once" (reclaim --now, in the same second) on its own campus, whose
// node c2 is a storage node (--role storage: a machine-room server that
// keeps checkpoints and is never lent). It waits until some job's
// freshest committed checkpoint has two holders other than its host in
// different buildings (P2.7: the standby, and the storage node, which the
// standby copied it to), then takes the job's host and four more nodes
// away, the standby among them, keeping the other holder and two Raft
// voters. Every job of a node that left must resume from a committed
// version at least as fresh as any committed before its restart: no
// committed checkpoint lost, nothing restarted from zero.
func TestCampusFiveOfEightNow(t *testing.T) {
	t.Parallel()
	requireScenarios(t)
	if testing.Short() {
		t.Skip("campus in a box: 8 agents in namespaces, minutes")
	}
	// A 40 s loss budget: a job's versions come about a minute apart, so
	// the copy to the storage node (across two 60 Mbit/s uplinks, shared
	// with the other jobs' copies) lands before the next version replaces
	// it; at the other scenarios' 8 s each copy is overtaken by a newer
	// version before it lands.
	b := startBoxBudget(t, "p1,p2,p3", 3, false, 40*time.Second, func(cfg *AgentsConfig) {
		cfg.NodeArgs = map[string][]string{"c2": {"--role", "storage"}}
	})
	b.storage = []string{"c2"}
	if out, err := b.a.CLI(context.Background(), "c2", "reclaim", "--now"); err == nil || !strings.Contains(out+err.Error(), "storage node") {
		t.Errorf("reclaim --now on the storage node: %v, %q; want it refused, naming the storage role", err, out)
	}
	b.fiveOfEightNow(t)
	for _, job := range b.jobs {
		b.checkNoFreshStart(job)
	}
	for _, j := range b.h.status().Jobs {
		if j.Node == "c2" {
			t.Errorf("job %s runs on the storage node c2", j.ID)
		}
	}
	b.logFigures()
}

// fiveOfEightNow runs the scenario of TestCampusFiveOfEightNow on b and
// returns the nodes that left.
func (b *box) fiveOfEightNow(t *testing.T) []string {
	b.t = t
	ctx := context.Background()
	b.waitCommitted(2*time.Minute, 1)
	var job, host, keep, lost string
	var version uint64
	var gone []string
	wait.ForWhy(t, 4*time.Minute, "a job with two holders in different buildings", func() (bool, string) {
		st := b.h.status()
		building, roles := map[string]string{}, map[string]web.RaftRole{}
		for _, m := range st.Cluster.Members {
			building[string(m.ID)], roles[string(m.ID)] = m.Building, m.RaftRole
		}
		why := "no job has two"
		for _, j := range st.Jobs {
			c := j.LastCheckpoint
			if j.State != "running" || c == nil || !slices.Contains(b.jobs, string(j.ID)) {
				continue
			}
			var hs []string
			for _, h := range c.Holders {
				if string(h) != string(j.Node) {
					hs = append(hs, string(h))
				}
			}
			why = fmt.Sprintf("%s v%d on %s: holders %v", j.ID, c.Version, j.Node, c.Holders)
			for _, k := range hs {
				for _, d := range hs {
					if d == k || building[d] == building[k] {
						continue
					}
					if left, ok := departing(b.a.Names(), string(j.Node), k, d, b.storage, roles); ok {
						job, host, keep, lost, version, gone = string(j.ID), string(j.Node), k, d, c.Version, left
						return true, ""
					}
				}
			}
		}
		return false, why
	})
	t.Logf("five-of-eight-now: %s v%d on %s, holders %s and %s (other building); %v leave at once, %s stays", job, version, host, keep, lost, gone, keep)
	jobs := map[string][]string{}
	for _, n := range gone {
		jobs[n] = b.jobsOn(n)
	}
	t0 := time.Now()
	errs := make([]error, len(gone))
	var wg sync.WaitGroup
	for i, n := range gone {
		wg.Go(func() {
			_, errs[i] = b.a.CLI(ctx, n, "reclaim", "--now")
		})
	}
	wg.Wait()
	for i, n := range gone {
		select {
		case <-b.a.Exited(n):
		case <-time.After(time.Minute):
			t.Fatalf("five-of-eight-now: %s still running a minute after reclaim --now (%v)", n, errs[i])
		}
	}
	t.Logf("five-of-eight-now: all five gone %v after the first reclaim", time.Since(t0).Round(time.Millisecond))
	// Every job of the nodes that left resumes elsewhere from a committed
	// version at least as fresh as any committed before (checkResume).
	for _, n := range gone {
		b.emergency("five-of-eight-now", n, jobs[n], t0)
	}
	wait.ForWhy(t, 2*time.Minute, "the reclaim history names "+job+"'s restore", func() (bool, string) {
		for _, rec := range b.h.status().Reclaims.History {
			if string(rec.Reclaim.Node) != host {
				continue
			}
			for _, o := range rec.Jobs {
				if string(o.Job) == job && o.To != "" {
					if o.Replica == "" || o.Version < version {
						t.Errorf("five-of-eight-now: %s restored from %q v%d, want a surviving holder's v%d or newer", job, o.Replica, o.Version, version)
					}
					return true, ""
				}
			}
		}
		return false, "not yet"
	})
	return gone
}

// departing picks the five nodes that leave: the host, lose and three
// others, never keep or a storage node (it cannot be reclaimed), so that
// two of the three Raft voters stay (a quorum) with keep and the storage
// nodes among the three that stay. ok is false when no such choice exists.
func departing(names []string, host, keep, lose string, storage []string, roles map[string]web.RaftRole) ([]string, bool) {
	voter := func(n string) bool { return roles[n] == web.RaftLeader || roles[n] == web.RaftFollower }
	stay := []string{keep}
	for _, n := range storage {
		if !slices.Contains(stay, n) {
			stay = append(stay, n)
		}
	}
	if slices.Contains(stay, host) || slices.Contains(stay, lose) {
		return nil, false
	}
	for _, n := range names {
		if len(stay) < 3 && n != host && n != lose && n != keep && voter(n) {
			stay = append(stay, n)
		}
	}
	for _, n := range names {
		if len(stay) < 3 && n != host && n != lose && !slices.Contains(stay, n) {
			stay = append(stay, n)
		}
	}
	votes := 0
	for _, n := range stay {
		if voter(n) {
			votes++
		}
	}
	if len(stay) != 3 || votes < 2 || len(names) != 8 {
		return nil, false
	}
	var out []string
	for _, n := range names {
		if !slices.Contains(stay, n) {
			out = append(out, n)
		}
	}
	return out, true
}

// TestDeparting: the five that leave hold the host and the lost holder,
// never the kept holder or a storage node, and leave two voters of three behind; without such a
// choice there is none.
func TestDeparting(t *testing.T) {
	names := []string{"a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2"}
	roles := map[string]web.RaftRole{"a1": web.RaftLeader, "b1": web.RaftFollower, "c1": web.RaftFollower}
	for _, tt := range []struct {
		host, keep, lose string
		storage          []string
		ok               bool
	}{
		{"a2", "c2", "a3", []string{"c2"}, true},
		{"a1", "c2", "a3", []string{"c2"}, true},  // the leader leaves: b1 and c1 stay
		{"a2", "c2", "b1", []string{"c2"}, true},  // a voter leaves: a1 and c1 stay
		{"a2", "b1", "a3", []string{"c2"}, true},  // keep is a voter
		{"a2", "b2", "a3", []string{"c2"}, false}, // b2, c2 and one voter: no quorum
		{"c2", "b1", "a3", []string{"c2"}, false}, // the host is a storage node
		{"a2", "b1", "c2", []string{"c2"}, false}, // the storage node cannot leave
	} {
		got, ok := departing(names, tt.host, tt.keep, tt.lose, tt.storage, roles)
		if ok != tt.ok {
			t.Errorf("host %s keep %s: ok %v (%v), want %v", tt.host, tt.keep, ok, got, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		votes := 0
		for _, n := range names {
			if !slices.Contains(got, n) && roles[n] != "" {
				votes++
			}
		}
		if len(got) != 5 || !slices.Contains(got, tt.host) || !slices.Contains(got, tt.lose) || slices.Contains(got, tt.keep) || slices.Contains(got, "c2") || votes < 2 {
			t.Errorf("host %s keep %s: leaving %v, want five with the host and %s, without %s or c2, two voters staying", tt.host, tt.keep, got, tt.lose, tt.keep)
		}
	}
}

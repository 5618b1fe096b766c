package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// bigStatus builds a cluster of the given size: nodes spread over 10
// buildings, jobs with decisions and checkpoints, one transfer per 10 jobs
// and 20 hand-offs that scored every node.
func bigStatus(nodes, jobs int) Status {
	s := scenarioA()
	s.Cluster.Members = nil
	s.Cluster.Bandwidth = nil
	for i := range nodes {
		s.Cluster.Members = append(s.Cluster.Members, member(fmt.Sprintf("node-%03d", i), fmt.Sprintf("b%d", i%10), MemberAlive, RaftNone, gpuA100, 4, 2, 0.2))
	}
	for a := range 10 {
		for b := range 10 {
			s.Cluster.Bandwidth = append(s.Cluster.Bandwidth, BuildingBandwidth{From: fmt.Sprintf("b%d", a), To: fmt.Sprintf("b%d", b), Available: 30e6, AvailableLow: 20e6, Capacity: 125e6})
		}
	}
	template := s.Jobs[0]
	s.Jobs = nil
	s.Transfers = s.Transfers[:1]
	for i := range jobs {
		j := template
		j.ID = policy.JobID(fmt.Sprintf("job-%03d", i))
		d := *template.Decision
		j.Decision = &d
		c := *template.LastCheckpoint
		j.LastCheckpoint = &c
		s.Jobs = append(s.Jobs, j)
		if i%10 == 0 {
			t := s.Transfers[0]
			t.Flow.ID = fmt.Sprintf("f-%03d", i)
			s.Transfers = append(s.Transfers, t)
		}
	}
	h := *s.Decisions[0].Handoff
	h.Candidates = nil
	for i := range nodes {
		h.Candidates = append(h.Candidates, Candidate{Node: policy.NodeID(fmt.Sprintf("node-%03d", i)), Score: float64(i), Transfer: time.Minute, Survival: 0.9})
	}
	s.Decisions = nil
	for range 20 {
		hd := h
		s.Decisions = append(s.Decisions, Decision{At: scenarioNow, Kind: DecisionHandoff, Handoff: &hd})
	}
	return s
}

// BenchmarkEndpoints measures one request of each kind against a cluster
// of the paper's size (54 nodes, 312 jobs) and a large one (500 nodes):
// what an open page (one /ui/live every 2 s) or a scrape costs the agent.
func BenchmarkEndpoints(b *testing.B) {
	for _, size := range []struct{ nodes, jobs int }{{54, 312}, {500, 1000}} {
		st := bigStatus(size.nodes, size.jobs)
		// Shared between calls: fine here, requests run one at a time and
		// prepare writes the same derived values each time.
		h, err := New(Config{Source: sourceFunc(func(ctx context.Context) (Status, error) { return st, nil }), Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		for _, path := range []string{"/ui/live", "/v1/status", "/metrics"} {
			b.Run(fmt.Sprintf("nodes=%d/jobs=%d%s", size.nodes, size.jobs, path), func(b *testing.B) {
				var bytes int
				for b.Loop() {
					req := httptest.NewRequest(http.MethodGet, path, nil)
					req.Host = "127.0.0.1:7949"
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("GET %s: %d", path, rec.Code)
					}
					bytes = rec.Body.Len()
				}
				b.ReportMetric(float64(bytes), "resp-bytes")
			})
		}
	}
}

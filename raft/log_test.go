package raft

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
)

// logRecords is a slog.Handler that keeps every record with its
// attributes (including those of With).
type logRecords struct {
	mu    *sync.Mutex
	attrs []slog.Attr
	recs  *[]map[string]string
}

func newLogRecords() *logRecords { return &logRecords{mu: &sync.Mutex{}, recs: &[]map[string]string{}} }

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message, "level": r.Level.String()}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, m)
	h.mu.Unlock()
	return nil
}
func (h *logRecords) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}
func (h *logRecords) WithGroup(string) slog.Handler { return h }

func (h *logRecords) count(match func(map[string]string) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range *h.recs {
		if match(r) {
			n++
		}
	}
	return n
}

// TestDepartedPeerErrorsAreLimited: when a voter goes away, the leader
// keeps trying it (counted at the dialer) but logs each of hashicorp/raft's
// errors about it once per window, as structured records at their level.
func TestDepartedPeerErrorsAreLimited(t *testing.T) {
	logs := newLogRecords()
	var mu sync.Mutex
	dials := map[string]int{}
	base := localConfig()
	base.Logger = slog.New(logs)
	base.DeadServerTimeout = time.Minute // the departed voter stays in the configuration
	base.Dial = func(network, addr string, timeout time.Duration) (net.Conn, error) {
		mu.Lock()
		dials[addr]++
		mu.Unlock()
		return net.DialTimeout(network, addr, timeout)
	}
	dialsTo := func(addr string) int {
		mu.Lock()
		defer mu.Unlock()
		return dials[addr]
	}
	tc := newTestCluster(t, 3, base, false)
	l := tc.waitConfigured(3, 20*time.Second)
	var gone policy.NodeID
	for id, c := range tc.nodes {
		if c != l {
			gone = id
		}
	}
	addr := tc.nodes[gone].Addr()
	tc.crash(gone)
	before := dialsTo(addr)
	wait.For(t, 30*time.Second, "the leader to try the departed voter 10 more times", func() bool { return dialsTo(addr)-before >= 10 })
	heartbeats := logs.count(func(r map[string]string) bool {
		return r["msg"] == "failed to heartbeat to" && r["logger"] == "raft" && r["level"] == "ERROR"
	})
	all := logs.count(func(r map[string]string) bool { return r["logger"] == "raft" && r["level"] == "ERROR" })
	if heartbeats != 1 {
		t.Errorf("'failed to heartbeat to' logged %d times over %d dials to the departed peer; want once in the window", heartbeats, dialsTo(addr)-before)
	}
	if all > 4 {
		t.Errorf("%d raft errors logged for one departed peer; want each kind once", all)
	}
	if n := logs.count(func(r map[string]string) bool { return len(r["msg"]) > 0 && r["msg"][0] == '[' }); n > 0 {
		t.Errorf("%d records still carry a \"[LEVEL]\" text prefix", n)
	}
}

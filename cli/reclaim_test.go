package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/reclaimnet/reclaimnet/agent"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// TestReclaimCommandLine checks the usage errors (exit 2) and the
// runtime failures without an agent (exit 1, with a clear message).
func TestReclaimCommandLine(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"nothing", nil, ExitUsage, "exactly one of"},
		{"notice and now", []string{"--notice", "60s", "--now"}, ExitUsage, "exactly one of"},
		{"status and cancel", []string{"--status", "--cancel"}, ExitUsage, "exactly one of"},
		{"zero notice", []string{"--notice", "0s"}, ExitUsage, "--notice must be positive"},
		{"bad notice", []string{"--notice", "soon"}, ExitUsage, "invalid value"},
		{"extra argument", []string{"--status", "x"}, ExitUsage, "unexpected arguments"},
		{"node and pin dir", []string{"--now", "--node", "a", "--pin-dir", "/x"}, ExitUsage, "not both"},
		{"notice without agent", []string{"--notice", "60s", "--data-dir", dir}, ExitError, "no agent running"},
		{"status without agent", []string{"--status", "--data-dir", dir}, ExitError, "no agent running"},
		{"cancel without agent", []string{"--cancel", "--data-dir", dir}, ExitError, "no agent running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, append([]string{"reclaim"}, tt.args...)...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("reclaim %q: got exit %d, stderr %q; want exit %d with %q", tt.args, code, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}
}

// TestReclaimNowAgentGone: with the agent gone, --now still tries the
// kill-switch (here: a pin dir with nothing pinned),
// then says the agent did not answer and exits 1.
func TestReclaimNowAgentGone(t *testing.T) {
	dir := t.TempDir()
	pins := t.TempDir()
	code, out, errOut := runCLI(t, "reclaim", "--now", "--data-dir", dir, "--pin-dir", pins)
	if code != ExitError {
		t.Errorf("got exit %d, want %d", code, ExitError)
	}
	// A temp dir is not bpffs: the attempt fails, is reported, and the
	// command goes on to the agent.
	if both := out + errOut; !strings.Contains(both, pins) || !strings.Contains(both, "continuing") {
		t.Errorf("stdout %q, stderr %q: want the kill-switch attempt at %s reported", out, errOut, pins)
	}
	if !strings.Contains(errOut, "the agent did not stop the jobs") || !strings.Contains(errOut, "no agent running") {
		t.Errorf("stderr %q: want the agent's failure named", errOut)
	}
}

// TestReclaimNowStorageNode: on a storage node (its info file says so)
// --now refuses before touching the kill-switch: isolating the node would
// cut off every copy it keeps.
func TestReclaimNowStorageNode(t *testing.T) {
	dir := t.TempDir()
	info, _ := json.Marshal(localapi.Info{Node: "nas", Storage: true})
	if err := os.WriteFile(filepath.Join(dir, localapi.InfoFile), info, 0o644); err != nil {
		t.Fatal(err)
	}
	pins := t.TempDir()
	code, out, errOut := runCLI(t, "reclaim", "--now", "--data-dir", dir, "--pin-dir", pins)
	if code != ExitError || !strings.Contains(errOut, "storage node") {
		t.Errorf("got exit %d, stderr %q; want exit %d naming the storage role", code, errOut, ExitError)
	}
	if strings.Contains(out+errOut, pins) {
		t.Errorf("stdout %q, stderr %q: the kill-switch at %s was tried on a storage node", out, errOut, pins)
	}
}

// TestReclaimStatusAfterLeave: with the agent gone, --status shows the
// report the agent stored when it left.
func TestReclaimStatusAfterLeave(t *testing.T) {
	dir := t.TempDir()
	rep := `{"node":"node-07","emergency":false,"announced":"2026-01-01T00:00:00Z","isolate_ns":1500,"isolated":true,
"moved":["a","c"],"degraded":["b"],"bytes_sent":4096,"used_for_ns":12000000000,
"downtimes":[{"job":"a","downtime_ns":2500000000,"limit_ns":2000000000},{"job":"c","downtime_ns":0,"limit_ns":1000000000}]}`
	if err := os.WriteFile(filepath.Join(dir, "reclaim-report.json"), []byte(rep), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "reclaim", "--status", "--data-dir", dir)
	if code != ExitOK {
		t.Fatalf("got exit %d (%s), want 0", code, errOut)
	}
	for _, want := range []string{"the agent has left", "node-07", "jobs moved:        2 a c", "jobs degraded:     1 b", "bytes sent:        4096", "machine used for:  12s", "time to isolate:   1.5µs",
		"a                down 2.5s (limit 2s)", "c                down until its start on the new node (not recorded yet) (limit 1s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output %q: missing %q", out, want)
		}
	}
}

// TestReclaimAgainstAgent drives --notice, --status, --cancel and --now
// against a real single-node agent (--dev, in process, no jobs, kernel
// enforcement off): the scheduled reclaim returns at once with its
// deadline, the status is complete (no jobs ran here) with the owner's
// report, cancel withdraws it, and --now says enforcement is off,
// makes the agent leave, and prints the report.
func TestReclaimAgainstAgent(t *testing.T) {
	cfg := soloConfig(t)
	a, done := startSolo(t, cfg)
	dir := cfg.DataDir

	code, out, errOut := runCLI(t, "reclaim", "--data-dir", dir, "--notice", "10m", "--detach")
	if code != ExitOK || !strings.Contains(out, "reclaim of solo announced") || !strings.Contains(out, "not enforced") {
		t.Fatalf("--notice: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "reclaim", "--data-dir", dir, "--status")
	for _, want := range []string{"complete", "no jobs ran here", "owner's report", "jobs moved:        0", "kernel enforcement off"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("--status: exit %d, output %q: missing %q", code, out, want)
		}
	}
	code, out, _ = runCLI(t, "reclaim", "--data-dir", dir, "--cancel")
	if code != ExitOK || !strings.Contains(out, "reclaim cancelled") {
		t.Errorf("--cancel: exit %d, output %q", code, out)
	}
	if _, ok := a.Coordinator().State().Reclaims["solo"]; ok {
		t.Errorf("reclaim still in the replicated state after --cancel")
	}
	code, out, _ = runCLI(t, "reclaim", "--data-dir", dir, "--status")
	if code != ExitOK || !strings.Contains(out, "no reclaim under way") {
		t.Errorf("--status after cancel: exit %d, output %q", code, out)
	}

	code, out, errOut = runCLI(t, "reclaim", "--data-dir", dir, "--now", "--pin-dir", t.TempDir())
	if code != ExitOK || !strings.Contains(out, "left without waiting") || !strings.Contains(out, "emergency reclaim of solo") {
		t.Fatalf("--now: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent: %v", err)
		}
		done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("agent still running after --now")
	}
}

// soloConfig is a single --dev node on loopback with a temporary data dir
// and system-chosen ports.
func soloConfig(t *testing.T) agent.Config {
	cfg := agent.DefaultConfig()
	cfg.Name, cfg.Dev, cfg.DataDir = "solo", true, t.TempDir()
	cfg.BindAddr, cfg.HTTPAddr = "127.0.0.1", ""
	cfg.GossipPort, cfg.RaftPort, cfg.TransferPort = 0, 0, 0
	return cfg
}

// startSolo runs an agent in process until the test ends (an error it
// stops with fails the test) and waits until it leads its cluster of one,
// so a submit can commit. done receives Run's result; a test that takes
// it puts back nil for the cleanup.
func startSolo(t *testing.T, cfg agent.Config) (*agent.Agent, chan error) {
	t.Helper()
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- a.Run(ctx, func(localapi.Info) { close(ready) }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("agent did not stop")
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("agent stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("agent not ready")
	}
	wait.For(t, 30*time.Second, "a leader", func() bool { c := a.Coordinator(); return c != nil && c.IsLeader() })
	return a, done
}

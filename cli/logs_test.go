package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

// syncBuffer is a bytes.Buffer safe for a writer and readers in other
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startCLIAgent runs 'reclaimnet agent ARGS' in this process until the
// test ends and returns its data dir and its log (stderr).
func startCLIAgent(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	env := &Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	full := append([]string{"reclaimnet", "agent", "--dev", "--name", "solo", "--data-dir", dir, "--http", "127.0.0.1:0",
		"--gossip-port", "0", "--raft-port", "0", "--transfer-port", "0"}, args...)
	go func() { done <- run(ctx, env, full) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("agent did not stop")
		}
	})
	wait.For(t, 30*time.Second, "the agent's info file", func() bool {
		_, err := os.Stat(filepath.Join(dir, localapi.InfoFile))
		return err == nil
	})
	wait.For(t, 30*time.Second, "a leader", func() bool {
		code, out, _ := runCLI(t, "status", "--json", "--data-dir", dir)
		var st web.Status
		return code == ExitOK && json.Unmarshal([]byte(out), &st) == nil && st.Cluster.Leader != ""
	})
	return dir, stderr
}

// TestAgentLogFormatJSON: with --log-format json every line the agent
// logs is one JSON object with a level and a message; Raft's and
// memberlist's records come through the adapter with their level and no
// "[LEVEL] name:" text; nothing is logged twice (the enforcement's
// state, a job's start).
func TestAgentLogFormatJSON(t *testing.T) {
	// The job's script lies where the owner lets guest jobs read.
	scripts := t.TempDir()
	if err := os.Chmod(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, logs := startCLIAgent(t, "--log-format", "json", "--log-level", "debug", "--fixed-load", "0.1", "--gpu", "RTX-4090:24GiB:8.9",
		"--guest-ro-path", scripts)
	script := filepath.Join(scripts, "job.sh")
	os.WriteFile(script, []byte("#!/bin/sh\ntouch \"$RECLAIMNET_READY_FILE\"\nwhile :; do sleep 0.1; done\n"), 0o755)
	if code, _, errOut := runCLI(t, "run", "--data-dir", dir, "--name", "logjob", "--", "/bin/sh", script); code != ExitOK {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	wait.For(t, 30*time.Second, "the job running", func() bool {
		_, out, _ := runCLI(t, "jobs", "--json", "--data-dir", dir)
		var jobs web.JobsResponse
		return json.Unmarshal([]byte(out), &jobs) == nil && len(jobs.Jobs) == 1 && jobs.Jobs[0].State == "running"
	})
	wait.For(t, 10*time.Second, "the job's start in the log", func() bool { return strings.Contains(logs.String(), `"msg":"job started"`) })
	// Its output's metadata as JSON ('reclaimnet logs --json').
	code, out, errOut := runCLI(t, "logs", "logjob", "--json", "--data-dir", dir)
	var view LogsView
	if err := json.Unmarshal([]byte(out), &view); code != ExitOK || err != nil || view.JobID != "logjob" || view.Node != "solo" {
		t.Errorf("logs --json: exit %d, %+v (%v), stderr %q; want the job and the node it runs on", code, view, err, errOut)
	}

	counts := map[string]int{}
	loggers := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON (%v): %s", err, line)
			continue
		}
		msg, _ := rec["msg"].(string)
		if _, ok := rec["level"].(string); !ok || msg == "" {
			t.Errorf("log record without level or message: %s", line)
		}
		if strings.HasPrefix(msg, "[") || strings.Contains(msg, "memberlist: ") || strings.Contains(msg, "raft: ") {
			t.Errorf("a library's text prefix left in the message: %s", line)
		}
		if l, ok := rec["logger"].(string); ok {
			loggers[l]++
		}
		counts[msg]++
	}
	if loggers["raft"] == 0 || loggers["memberlist"] == 0 {
		t.Errorf("records by logger %v: want raft's and memberlist's among them", loggers)
	}
	for _, msg := range []string{"job started", "kernel enforcement off: no rate ceilings, no kill-switch, no measured bandwidth"} {
		if counts[msg] != 1 {
			t.Errorf("%q logged %d times, want once", msg, counts[msg])
		}
	}
	for msg, n := range counts {
		if strings.Contains(msg, "kernel enforcement") && msg != "kernel enforcement off: no rate ceilings, no kill-switch, no measured bandwidth" {
			t.Errorf("another enforcement line %q (%d times)", msg, n)
		}
	}
}

// TestAgentLogFormatText: the default is key=value text; a wrong format
// is a usage error.
func TestAgentLogFormatText(t *testing.T) {
	if code, _, errOut := runCLI(t, "agent", "--dev", "--log-format", "xml"); code != ExitUsage || !strings.Contains(errOut, `--log-format "xml": want text or json`) {
		t.Errorf("--log-format xml: exit %d, stderr %q", code, errOut)
	}
	_, logs := startCLIAgent(t)
	first := strings.SplitN(logs.String(), "\n", 2)[0]
	if !strings.HasPrefix(first, "time=") || !strings.Contains(first, " level=") || !strings.Contains(first, " msg=") {
		t.Errorf("first log line %q: want slog's text format", first)
	}
}

package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

// TestFollowerLines: the follower prints a job's line when its state
// changes, its bytes left at most every followQuiet, one line once every
// job is accounted for, and one when the node leaves.
func TestFollowerLines(t *testing.T) {
	var buf bytes.Buffer
	f := &follower{w: &buf, lines: map[string]string{}, printed: map[string]time.Time{}}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	deadline := t0.Add(60 * time.Second)
	st := func(detail string, complete bool) localapi.ReclaimStatus {
		return localapi.ReclaimStatus{Node: "n1", Active: true, Deadline: deadline, Complete: complete,
			Jobs: []localapi.ReclaimJob{{Job: "llama", Detail: detail}}}
	}
	push := func(done int64) []web.Transfer {
		return []web.Transfer{
			{Flow: web.Flow{Job: "llama", From: "n1", To: "n2"}, BytesDone: done, BytesTotal: 4 << 30, Achieved: 100 << 20},
			{Flow: web.Flow{Job: "other", From: "n1", To: "n2"}, BytesDone: 0, BytesTotal: 1 << 30}, // another job's
			{Flow: web.Flow{Job: "llama", From: "n3", To: "n1"}, BytesDone: 0, BytesTotal: 1 << 30}, // to this node
		}
	}
	steps := []struct {
		at        time.Duration
		st        localapi.ReclaimStatus
		transfers []web.Transfer
	}{
		{0, st("still running", false), nil},
		{time.Second, st("still running", false), nil}, // nothing new
		{2 * time.Second, st("handing off to n2", false), push(1 << 30)},
		{3 * time.Second, st("handing off to n2", false), push(2 << 30)}, // bytes only, too soon
		{8 * time.Second, st("handing off to n2", false), push(3 << 30)}, // bytes only, 6 s later
		{9 * time.Second, st("handed off to n2 (running there)", true), nil},
		{10 * time.Second, st("handed off to n2 (running there)", true), nil},
	}
	for _, s := range steps {
		if f.update(s.st, s.transfers, t0.Add(s.at)) {
			t.Fatalf("update at %v ended following", s.at)
		}
	}
	left := st("handed off to n2 (running there)", true)
	left.Report = &localapi.ReclaimReport{Node: "n1", Left: deadline}
	f.update(left, nil, deadline)
	want := []string{
		"[1m0s left] llama: still running",
		"[58s left] llama: handing off to n2; 3.0 GiB of 4.0 GiB left at 100 MiB/s",
		"[52s left] llama: handing off to n2; 1.0 GiB of 4.0 GiB left at 100 MiB/s",
		"[51s left] llama: handed off to n2 (running there)",
		"[51s left] every job is handed off or accounted for; the node leaves at the deadline, 2026-03-01T12:01:00Z",
		"the node is leaving (2026-03-01T12:01:00Z); waiting for its agent to exit",
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	buf.Reset()
	if !f.update(localapi.ReclaimStatus{Node: "n1"}, nil, deadline) || !strings.Contains(buf.String(), "was cancelled") {
		t.Errorf("a cancelled reclaim: %q; want following to end saying so", buf.String())
	}
}

// TestReclaimFollowsUntilLeave: 'reclaim --notice' against a real agent
// with a running job follows the reclaim: the job's fate, the node
// leaving at the deadline, the agent gone, the owner's report; the
// command returns once the agent has exited. With --json it prints one
// object a line.
func TestReclaimFollowsUntilLeave(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "text", true: "json"}[asJSON], func(t *testing.T) {
			// The job's script lies where the owner lets guest jobs read.
			scripts := t.TempDir()
			if err := os.Chmod(scripts, 0o755); err != nil {
				t.Fatal(err)
			}
			dir, _ := startCLIAgent(t, "--fixed-load", "0.1", "--gpu", "RTX-4090:24GiB:8.9", "--guest-ro-path", scripts)
			script := filepath.Join(scripts, "job.sh")
			os.WriteFile(script, []byte("#!/bin/sh\ntouch \"$RECLAIMNET_READY_FILE\"\nwhile :; do sleep 0.1; done\n"), 0o755)
			if code, _, errOut := runCLI(t, "run", "--data-dir", dir, "--name", "fjob", "--", "/bin/sh", script); code != ExitOK {
				t.Fatalf("run: %s", errOut)
			}
			wait.For(t, 30*time.Second, "the job running", func() bool {
				_, out, _ := runCLI(t, "jobs", "--json", "--data-dir", dir)
				var jobs web.JobsResponse
				return json.Unmarshal([]byte(out), &jobs) == nil && len(jobs.Jobs) == 1 && jobs.Jobs[0].State == "running"
			})
			args := []string{"reclaim", "--notice", "3s", "--data-dir", dir}
			if asJSON {
				args = append(args, "--json")
			}
			start := time.Now()
			code, out, errOut := runCLI(t, args...)
			took := time.Since(start)
			if code != ExitOK {
				t.Fatalf("reclaim: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			if took < 3*time.Second {
				t.Errorf("returned after %v, before the 3 s deadline", took)
			}
			if _, err := localapi.Call(t.Context(), dir, localapi.Request{Op: localapi.OpStatus}); err == nil {
				t.Errorf("the agent still answers after reclaim returned")
			}
			if !asJSON {
				for _, want := range []string{"reclaim of solo announced", "] fjob: ", "the node has left the cluster", "owner's report (scheduled reclaim of solo", "jobs degraded:     1 fjob"} {
					if !strings.Contains(out, want) {
						t.Errorf("output lacks %q:\n%s", want, out)
					}
				}
				return
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			var last localapi.ReclaimStatus
			for _, l := range lines {
				if err := json.Unmarshal([]byte(l), &last); err != nil {
					t.Fatalf("line %q: %v", l, err)
				}
			}
			if len(lines) < 2 || last.Report == nil || last.Report.Node != "solo" || len(last.Report.Degraded) != 1 {
				t.Errorf("JSON lines end with %+v; want the report with the degraded job:\n%s", last, out)
			}
		})
	}
}

// fakeReclaimAgent answers the control socket in dir with the reclaim
// status now() gives, until stop is called; status requests get an error
// (following needs no transfers).
func fakeReclaimAgent(t *testing.T, dir string, now func() localapi.ReclaimStatus) (stop func()) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(dir, localapi.SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			var req localapi.Request
			resp := localapi.Response{Error: "not served"}
			if json.NewDecoder(conn).Decode(&req) == nil && req.Op == localapi.OpReclaimStatus {
				st := now()
				resp = localapi.Response{Reclaim: &st}
			}
			json.NewEncoder(conn).Encode(resp)
			conn.Close()
		}
	})
	return func() { ln.Close(); wg.Wait() }
}

// TestFollowWaitsForAgentHoldingItsDataDir: an agent that stays up
// reclaimed closes its socket while its cluster incarnation ends and
// opens it again out of the cluster. Following waits for it as long as
// the process holds its data dir's lock, past followGone (a loaded
// machine), and reports the node held reclaimed; an agent that exits
// (its lock dropped) counts as gone after followGone.
func TestFollowWaitsForAgentHoldingItsDataDir(t *testing.T) {
	for _, staysUp := range []bool{true, false} {
		t.Run(map[bool]string{true: "stays up", false: "exits"}[staysUp], func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			lock, err := os.OpenFile(filepath.Join(dir, localapi.LockFile), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close()
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(time.Second)
			stop := fakeReclaimAgent(t, dir, func() localapi.ReclaimStatus {
				return localapi.ReclaimStatus{Node: "solo", Active: true, Complete: true, Deadline: deadline}
			})
			done := make(chan error, 1)
			var out syncBuffer
			go func() { done <- followReclaim(t.Context(), &Env{Stdout: &out, Stderr: &out}, dir, false) }()
			time.Sleep(deadline.Sub(time.Now()))
			stop() // the incarnation ends: the socket closes
			if !staysUp {
				syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
			}
			silent := followGone + 2*time.Second
			select {
			case err := <-done:
				if staysUp {
					t.Fatalf("following ended %v into the silence (%v), with the agent holding its data dir:\n%s", followGone, err, out.String())
				}
				if !strings.Contains(out.String(), "the node has left the cluster\n") {
					t.Errorf("an exited agent: %q; want the node gone", out.String())
				}
				return
			case <-time.After(silent):
				if !staysUp {
					t.Fatalf("still following %v after the agent exited:\n%s", silent, out.String())
				}
			}
			stop = fakeReclaimAgent(t, dir, func() localapi.ReclaimStatus {
				return localapi.ReclaimStatus{Node: "solo", Reclaimed: true, Report: &localapi.ReclaimReport{Node: "solo"}}
			})
			defer stop()
			select {
			case err := <-done:
				if err != nil || !strings.Contains(out.String(), "its agent holds it reclaimed") {
					t.Errorf("following: %v, %q; want the node held reclaimed", err, out.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("following did not end once the agent answered reclaimed:\n%s", out.String())
			}
		})
	}
}

package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
)

// testConfig is DefaultLocalConfig with the test's logger and a sandbox
// of the test's own: its cgroup parent, state directory, and the
// examples directory as the owner's read-only path.
func testConfig(t *testing.T) Config {
	c := DefaultLocalConfig()
	c.Logger = slog.New(slog.DiscardHandler)
	c.Sandbox = testSandbox(t)
	return c
}

// testSandbox needs root; without it the test skips, except under CI=true
// where it fails.
func testSandbox(t *testing.T) sandbox.Config {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but not root: the sandbox needs root")
		}
		t.Skip("needs root for the sandbox")
	}
	examples, err := filepath.Abs(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	c := sandbox.DefaultConfig()
	c.CgroupParent = fmt.Sprintf("reclaimnet-test-%d-%s", os.Getpid(), regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(t.Name(), "_"))
	c.StateDir = t.TempDir()
	c.ReadOnlyPaths = []string{examples}
	return c
}

func newSupervisor(t *testing.T, cfg Config) *Supervisor {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if st := s.Sandbox(); !st.Available {
		t.Fatalf("sandbox: %s", st)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// startJob starts a shell job and stops it when the test ends.
func startJob(t *testing.T, s *Supervisor, script string, mod ...func(*Spec)) *Job {
	t.Helper()
	spec := Spec{JobID: "job-" + strings.ReplaceAll(t.Name(), "/", "-"), Command: []string{"/bin/sh", "-c", script}, WorkDir: t.TempDir()}
	for _, m := range mod {
		m(&spec)
	}
	j, err := s.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		j.Stop(ctx)
	})
	return j
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEvent reads events until one of kind arrives.
func waitEvent(t *testing.T, j *Job, kind EventKind, timeout time.Duration) Event {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var seen []string
	for {
		select {
		case e, ok := <-j.Events():
			if !ok {
				t.Fatalf("events closed before %s (saw %v)", kind, seen)
			}
			seen = append(seen, e.Kind.String())
			if e.Kind == kind {
				return e
			}
		case <-timer.C:
			t.Fatalf("no %s event within %s (saw %v)", kind, timeout, seen)
		}
	}
}

func mustWait(t *testing.T, j *Job, timeout time.Duration) Result {
	t.Helper()
	select {
	case <-j.Done():
		return j.Wait()
	case <-time.After(timeout):
		t.Fatalf("job did not end within %s", timeout)
		return Result{}
	}
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	state, _, ok := parseStat(b)
	return ok && state != 'Z' && state != 'X'
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// fakeClock is a manual clock: timers fire only when Advance passes them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	added  chan struct{} // signalled when a timer is created
}

type fakeTimer struct {
	clock *fakeClock
	at    time.Time
	c     chan time.Time
	done  bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), added: make(chan struct{}, 64)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clock: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	f.timers = append(f.timers, t)
	select {
	case f.added <- struct{}{}:
	default:
	}
	return t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for _, t := range f.timers {
		if !t.done && !t.at.After(f.now) {
			t.done = true
			t.c <- f.now
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

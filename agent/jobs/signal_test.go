package jobs

import (
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/state"
)

// Every checkpoint signal the replicated spec may name maps to a number
// here (a spec that validates always starts).
func TestEveryCheckpointSignalMaps(t *testing.T) {
	t.Parallel()
	for _, name := range state.CheckpointSignals {
		sig, err := supervisorSignal(state.JobSpec{Signal: name})
		if err != nil || sig <= 0 || sig == syscall.SIGKILL || sig == syscall.SIGSTOP || sig == syscall.SIGTERM {
			t.Errorf("signal %s maps to %v, %v: want a catchable signal other than TERM", name, sig, err)
		}
	}
	if sig, err := supervisorSignal(state.JobSpec{}); sig != 0 || err != nil {
		t.Errorf("no signal maps to %v, %v: want 0 (the supervisor's default)", sig, err)
	}
}

// A job submitted with --signal USR2 gets its checkpoint requests as
// SIGUSR2: the step job traps only USR2, so a USR1 would kill it (its
// default action) instead of producing checkpoints.
func TestCheckpointsRequestedWithConfiguredSignal(t *testing.T) {
	t.Parallel()
	tc := newCluster(t, []int{1}, fastSupervisor())
	tc.submitSpec("usr2", state.JobSpec{Command: []string{"/bin/sh", tc.script},
		Env: []string{"STEPLOG=" + tc.stepLog, "CKSIG=USR2"}, Signal: "USR2"})
	host := tc.waitRunning("usr2", "")
	wait.For(t, 30*time.Second, "three checkpoints requested with USR2 and stored", func() bool {
		n := 0
		for _, e := range readSteps(t, tc.stepLog) {
			if e.kind == "ckpt" {
				n++
			}
		}
		return n >= 3 && len(tc.nodes[host].store.Versions("usr2")) >= 3
	})
	if s := starts(readSteps(t, tc.stepLog)); len(s) != 1 {
		t.Errorf("job started %d times, want once (a wrong checkpoint signal kills it): %+v", len(s), s)
	}
}

// A job that ignores SIGTERM is killed about its own --grace after the
// SIGTERM, not the supervisor's default (1 s here).
func TestStopUsesConfiguredGrace(t *testing.T) {
	t.Parallel()
	sc := fastSupervisor()
	sc.StopGrace = time.Second
	const grace = 6 * time.Second
	tc := newCluster(t, []int{1}, sc)
	tc.submitSpec("stubborn", state.JobSpec{Command: []string{"/bin/sh", tc.script},
		Env: []string{"STEPLOG=" + tc.stepLog, "IGNTERM=1"}, Grace: grace})
	tc.waitRunning("stubborn", "")
	var pid int
	wait.For(t, 30*time.Second, "the job's first steps", func() bool {
		evs := readSteps(t, tc.stepLog)
		s := starts(evs)
		if len(s) == 0 || len(evs) < 3 {
			return false
		}
		p, err := strconv.Atoi(s[0].pid)
		pid = p
		return err == nil
	})
	tc.submit(state.CancelJob{Job: "stubborn"})
	var termAt time.Time
	wait.For(t, 30*time.Second, "the SIGTERM logged by the job", func() bool {
		for _, e := range readSteps(t, tc.stepLog) {
			if e.kind == "term" {
				termAt = time.Now()
				return true
			}
		}
		return false
	})
	groupGone := func() bool { return errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH) }
	wait.For(t, 60*time.Second, "the process group gone after SIGKILL", groupGone)
	took := time.Since(termAt)
	if took < grace-time.Second || took > grace+25*time.Second {
		t.Errorf("process group ended %v after its SIGTERM was seen, want about the job's grace %v (the supervisor's default is %v)", took.Round(10*time.Millisecond), grace, sc.StopGrace)
	}
	// It kept stepping through the grace: TERM did not end it, KILL did.
	termSeen, after := false, 0
	for _, e := range readSteps(t, tc.stepLog) {
		switch {
		case e.kind == "term":
			termSeen = true
		case termSeen && e.kind == "step":
			after++
		}
	}
	if after == 0 {
		t.Errorf("no step after the SIGTERM: the job did not ignore TERM, so the grace was not exercised")
	}
}

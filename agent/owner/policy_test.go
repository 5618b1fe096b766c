package owner

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func policy(t testing.TB, c Config) *Policy {
	t.Helper()
	p, err := c.Policy()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// world is a fake machine: what the sources would report at each instant.
type world struct {
	gpu   func(now time.Time) []GPUProcess
	input func(now time.Time) time.Time
	cpu   func(now time.Time) float64
}

func (w world) observe(now time.Time) Observations {
	var o Observations
	if w.gpu != nil {
		o.GPU, o.GPUKnown = w.gpu(now), true
	}
	if w.input != nil {
		o.Input, o.InputKnown = Input{At: w.input(now), Via: "input device event3"}, true
	}
	if w.cpu != nil {
		o.CPU, o.CPUKnown = CPULoad{Cores: w.cpu(now), TopPID: 77, TopName: "make"}, true
	}
	return o
}

type step struct {
	at time.Time
	d  Decision
}

// drive calls Decide every `every` from `from` until `to` (the agent's
// loop with a fake clock) and returns the decisions that did something.
func drive(p *Policy, s *State, w world, from, to time.Time, every time.Duration) []step {
	var out []step
	for now := from; now.Before(to); now = now.Add(every) {
		var d Decision
		*s, d = p.Decide(*s, w.observe(now), now)
		if d.Do != Nothing {
			out = append(out, step{now, d})
		}
	}
	return out
}

func describe(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		b.WriteString(s.at.UTC().Format("01-02 15:04:05 ") + s.d.String() + "\n")
	}
	return b.String()
}

// A weeknight window: lent at its start, the reclaim announced the lead
// time before its end with the rest of the window as notice, then not lent
// until the next night.
func TestWindowEndAnnouncedAheadOfTime(t *testing.T) {
	be := zone(t, "Europe/Berlin")
	p := policy(t, Config{LendWindows: []string{"Mon-Fri 19:00-08:00"}, LendTZ: "Europe/Berlin"})
	var s State
	steps := drive(p, &s, world{gpu: func(time.Time) []GPUProcess { return nil }},
		at(be, 2026, 3, 2, 18, 0), at(be, 2026, 3, 3, 19, 30), 30*time.Second)
	if len(steps) != 3 {
		t.Fatalf("decisions:\n%s want lend, reclaim, lend", describe(steps))
	}
	lend, reclaim, again := steps[0], steps[1], steps[2]
	if !lend.at.Equal(at(be, 2026, 3, 2, 19, 0)) || lend.d.Do != Lend || lend.d.Reason != "lendable until Tue 08:00, owner idle" {
		t.Errorf("first: %s at %v, want a lend at 19:00 until Tue 08:00", lend.d, lend.at)
	}
	end := at(be, 2026, 3, 3, 8, 0)
	if !reclaim.at.Equal(end.Add(-DefaultLead)) || reclaim.d.Do != Reclaim || reclaim.d.Now ||
		reclaim.d.Notice != DefaultLead || !reclaim.d.Deadline.Equal(end) || reclaim.d.Kind != KindWindow {
		t.Errorf("second: %s at %v (deadline %v), want a reclaim at 07:50 with 10m notice", reclaim.d, reclaim.at, reclaim.d.Deadline)
	}
	if reclaim.d.Reason != "lending window ends 08:00" {
		t.Errorf("reason %q, want %q", reclaim.d.Reason, "lending window ends 08:00")
	}
	if !again.at.Equal(at(be, 2026, 3, 3, 19, 0)) || again.d.Do != Lend {
		t.Errorf("third: %s at %v, want a lend at Tue 19:00", again.d, again.at)
	}
}

// Lending that would begin less than the lead time before the window ends
// does not begin.
func TestNoLendJustBeforeTheEnd(t *testing.T) {
	be := zone(t, "Europe/Berlin")
	p := policy(t, Config{LendWindows: []string{"Mon 19:00-20:00"}, LendTZ: "Europe/Berlin", Idle: Duration(15 * time.Minute)})
	var s State
	// The owner works until 19:40: idle long enough only at 19:55.
	w := world{input: func(now time.Time) time.Time { return minTime(now, at(be, 2026, 3, 2, 19, 40)) }}
	w.gpu = func(time.Time) []GPUProcess { return nil }
	p.Input = Action{Notice: time.Minute}
	if steps := drive(p, &s, w, at(be, 2026, 3, 2, 18, 0), at(be, 2026, 3, 2, 21, 0), 30*time.Second); len(steps) != 0 {
		t.Fatalf("decisions:\n%s want none", describe(steps))
	}
	st := p.Status(s, at(be, 2026, 3, 2, 19, 56))
	if st.State != StateOutside || !strings.Contains(st.Why, "within the 10m0s notice") {
		t.Errorf("status %s: %s, want outside window, within the notice", st.State, st.Why)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// An owner process on a lent GPU ends lending with the GPU's action, and
// the machine is lent again only after the owner has been idle 15 minutes.
func TestOwnerGPUProcessAndHysteresis(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	p := policy(t, Config{LendTZ: "UTC"})
	var s State
	proc := []GPUProcess{{PID: 4242, GPU: 0, Name: "python3"}}
	start, stop := t0.Add(time.Hour), t0.Add(90*time.Minute)
	w := world{gpu: func(now time.Time) []GPUProcess {
		if !now.Before(start) && now.Before(stop) {
			return proc
		}
		return nil
	}}
	steps := drive(p, &s, w, t0, t0.Add(3*time.Hour), 5*time.Second)
	if len(steps) != 3 {
		t.Fatalf("decisions:\n%s want lend, reclaim, lend", describe(steps))
	}
	if steps[0].d.Do != Lend || !steps[0].at.Equal(t0) || steps[0].d.Reason != "lendable with no end, owner idle" {
		t.Errorf("first: %s at %v, want a lend at once", steps[0].d, steps[0].at)
	}
	r := steps[1]
	if r.d.Do != Reclaim || r.d.Now || r.d.Notice != 2*time.Minute || !r.at.Equal(start) || r.d.Kind != KindGPU {
		t.Errorf("second: %s at %v, want a reclaim with the default 2m notice at %v", r.d, r.at, start)
	}
	if want := "owner process 4242 (python3) on GPU 0"; r.d.Reason != want {
		t.Errorf("reason %q, want %q", r.d.Reason, want)
	}
	// The last round that saw the process was at stop-5s.
	if l := steps[2]; l.d.Do != Lend || !l.at.Equal(stop.Add(-5*time.Second).Add(DefaultIdle)) {
		t.Errorf("third: %s at %v, want a lend 15m after the process was last seen (%v)", l.d, l.at, stop.Add(-5*time.Second).Add(DefaultIdle))
	}
}

// Input resets the idle clock: the owner touching the keyboard 14 minutes
// into the wait restarts it.
func TestInputRestartsIdleWait(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	p := policy(t, Config{LendTZ: "UTC", Input: "notice 1m"})
	touches := []time.Time{t0.Add(-time.Hour), t0.Add(10 * time.Minute), t0.Add(24 * time.Minute)}
	w := world{input: func(now time.Time) time.Time {
		var last time.Time
		for _, x := range touches {
			if !x.After(now) {
				last = x
			}
		}
		return last
	}}
	var s State
	steps := drive(p, &s, w, t0, t0.Add(time.Hour), 10*time.Second)
	// Lent at once (idle an hour), reclaimed by the touch at 09:10 (seen
	// by the round at 09:10), lent 15 minutes after the touch at 09:24.
	want := []struct {
		at time.Time
		do Do
	}{{t0, Lend}, {touches[1], Reclaim}, {touches[2].Add(DefaultIdle), Lend}}
	if len(steps) != len(want) {
		t.Fatalf("decisions:\n%s", describe(steps))
	}
	for i, w := range want {
		if steps[i].d.Do != w.do || !steps[i].at.Equal(w.at) {
			t.Errorf("decision %d: %s at %v, want %v at %v", i, steps[i].d, steps[i].at, w.do, w.at)
		}
	}
	if r := steps[1].d.Reason; r != "owner input at 09:10 (input device event3)" || steps[1].d.Notice != time.Minute {
		t.Errorf("reclaim %s, want 1m notice for owner input at 09:10", steps[1].d)
	}
}

// CPU load counts only when it stays above the threshold for CPUFor.
func TestCPULoadMustLast(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	p := policy(t, Config{LendTZ: "UTC", CPU: "notice 5m", CPUThreshold: 1.5, CPUFor: Duration(2 * time.Minute)})
	busy := func(from, to time.Duration) func(time.Time) bool {
		return func(now time.Time) bool { return !now.Before(t0.Add(from)) && now.Before(t0.Add(to)) }
	}
	short, long := busy(10*time.Minute, 11*time.Minute+30*time.Second), busy(30*time.Minute, 40*time.Minute)
	w := world{cpu: func(now time.Time) float64 {
		if short(now) || long(now) {
			return 2.5
		}
		return 1.5 // at the threshold, not above it
	}}
	var s State
	steps := drive(p, &s, w, t0, t0.Add(45*time.Minute), 10*time.Second)
	if len(steps) != 2 || steps[0].d.Do != Lend {
		t.Fatalf("decisions:\n%s want lend, reclaim", describe(steps))
	}
	r := steps[1]
	if r.d.Do != Reclaim || !r.at.Equal(t0.Add(32*time.Minute)) || r.d.Notice != 5*time.Minute || r.d.Kind != KindCPU {
		t.Errorf("reclaim %s at %v, want notice 5m at 09:32", r.d, r.at)
	}
	if want := "owner CPU load 2.5 cores for 2m0s, above 1.5 (busiest: process 77 make)"; r.d.Reason != want {
		t.Errorf("reason %q, want %q", r.d.Reason, want)
	}
}

// reclaimsInAnyHour is the largest number of times in ts within one
// hour (a sliding window), by brute force.
func reclaimsInAnyHour(ts []time.Time) int {
	best := 0
	for i := range ts {
		n := 0
		for _, u := range ts[i:] {
			if u.Sub(ts[i]) < time.Hour {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

func TestRateCap(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	p := policy(t, Config{LendTZ: "UTC", GPU: "notice 1m", Idle: Duration(time.Minute), MaxReclaimsPerHour: 2})
	// The owner's GPU job runs for 30 s every 5 minutes, from 09:05.
	w := world{gpu: func(now time.Time) []GPUProcess {
		if now.Sub(t0)%(5*time.Minute) < 30*time.Second && now.Sub(t0) >= time.Minute {
			return []GPUProcess{{PID: 9, GPU: 1}}
		}
		return nil
	}}
	var s State
	steps := drive(p, &s, w, t0, t0.Add(3*time.Hour), 10*time.Second)
	var reclaims []time.Time
	for _, st := range steps {
		if st.d.Do == Reclaim {
			reclaims = append(reclaims, st.at)
		}
	}
	if n := reclaimsInAnyHour(reclaims); n != 2 {
		t.Errorf("%d reclaims in one hour, want the cap, 2:\n%s", n, describe(steps))
	}
	// The first two come 5 minutes apart; the third an hour after the
	// first, when the first no longer counts (and the owner's next burst).
	if len(reclaims) < 3 || reclaims[1].Sub(reclaims[0]) != 5*time.Minute || reclaims[2].Sub(reclaims[0]) < time.Hour {
		t.Errorf("reclaims at %v", reclaims)
	}
	mid := reclaims[1].Add(10 * time.Minute)
	var probe State
	probe, _ = p.Decide(State{}, Observations{}, t0)
	for _, r := range reclaims[:2] {
		probe.Reclaims = append(probe.Reclaims, r)
	}
	probe.Phase = PhaseUnlent
	st := p.Status(probe, mid)
	if st.State != StateRateLimited || st.NextLend == nil || !st.NextLend.At.Equal(reclaims[0].Add(time.Hour)) {
		t.Errorf("status at %v: %s, next lend %+v, want rate limited until %v", mid, st.State, st.NextLend, reclaims[0].Add(time.Hour))
	}
}

// TestRateCapProperty drives random owner activity and checks against
// brute force that no hour ever holds more activity reclaims than the
// cap, and that the machine is lent again whenever everything allows it.
func TestRateCapProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 2))
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	const every = 30 * time.Second
	for trial := range 40 {
		n := 1 + rng.IntN(4)
		idle := time.Duration(rng.IntN(6)) * time.Minute
		p := policy(t, Config{LendTZ: "UTC", GPU: "notice 1m", Idle: Duration(idle), MaxReclaimsPerHour: n})
		if idle == 0 {
			p.Idle = 0
		}
		// Busy or not, in runs of random length.
		busy := map[time.Time]bool{}
		on := false
		for now := t0; now.Before(t0.Add(8 * time.Hour)); now = now.Add(every) {
			if rng.IntN(10) == 0 {
				on = !on
			}
			busy[now] = on
		}
		var s State
		var reclaims []time.Time
		var lastBusy time.Time
		for now := t0; now.Before(t0.Add(8 * time.Hour)); now = now.Add(every) {
			var o Observations
			o.GPUKnown = true
			if busy[now] {
				o.GPU = []GPUProcess{{PID: 5, GPU: 0}}
				lastBusy = now
			}
			wasUnlent := s.Phase != PhaseLent && (s.Phase != PhaseReclaiming || !now.Before(s.Deadline))
			var d Decision
			s, d = p.Decide(s, o, now)
			if d.Do == Reclaim {
				reclaims = append(reclaims, now)
			}
			if wasUnlent {
				inHour := 0
				for _, r := range reclaims {
					if now.Sub(r) < time.Hour {
						inHour++
					}
				}
				may := inHour < n && !busy[now] && (lastBusy.IsZero() || now.Sub(lastBusy) >= p.Idle)
				if may != (d.Do == Lend) {
					t.Fatalf("trial %d at %v: %s, but lending allowed is %v (%d reclaims in the hour, cap %d, last busy %v)",
						trial, now, d, may, inHour, n, lastBusy)
				}
			}
		}
		if got := reclaimsInAnyHour(reclaims); got > n {
			t.Fatalf("trial %d: %d reclaims in one hour, cap %d", trial, got, n)
		}
	}
}

// The owner's reclaim holds: the machine stays unlent, however idle the
// owner, until the owner lends it or the next window opens.
func TestOwnerReclaimThenLend(t *testing.T) {
	be := zone(t, "Europe/Berlin")
	p := policy(t, Config{LendWindows: []string{"Mon-Fri 19:00-08:00"}, LendTZ: "Europe/Berlin"})
	w := world{gpu: func(time.Time) []GPUProcess { return nil }}
	var s State
	drive(p, &s, w, at(be, 2026, 3, 2, 19, 0), at(be, 2026, 3, 2, 22, 0), time.Minute)
	if s.Phase != PhaseLent {
		t.Fatalf("phase %q at 22:00, want lent", s.Phase)
	}
	s = p.OwnerReclaimed(s, at(be, 2026, 3, 2, 22, 0), at(be, 2026, 3, 2, 22, 0))
	if steps := drive(p, &s, w, at(be, 2026, 3, 2, 22, 0), at(be, 2026, 3, 2, 23, 0), time.Minute); len(steps) != 0 {
		t.Fatalf("after the owner's reclaim:\n%s want nothing", describe(steps))
	}
	st := p.Status(s, at(be, 2026, 3, 2, 23, 0))
	if st.State != StateReclaimed || st.Lent || st.NextLend == nil || !st.NextLend.At.Equal(at(be, 2026, 3, 3, 19, 0)) {
		t.Errorf("status %s (next lend %+v), want reclaimed until Tue 19:00", st.State, st.NextLend)
	}
	// reclaimnet lend.
	now := at(be, 2026, 3, 2, 23, 0)
	s, d, err := p.Lend(s, time.Time{}, now)
	if err != nil || d.Do != Lend || s.Phase != PhaseLent || d.Reason != "lent by the owner (reclaimnet lend) until Tue 08:00" {
		t.Fatalf("lend: %s, %v (phase %q)", d, err, s.Phase)
	}
	steps := drive(p, &s, w, now, at(be, 2026, 3, 3, 8, 0), time.Minute)
	if len(steps) != 1 || steps[0].d.Do != Reclaim || !steps[0].at.Equal(at(be, 2026, 3, 3, 7, 50)) {
		t.Errorf("after lend:\n%s want only the window's reclaim at 07:50", describe(steps))
	}

	// Without lend the hold ends when the next window opens.
	var s2 State
	s2 = p.OwnerReclaimed(s2, at(be, 2026, 3, 2, 22, 0), at(be, 2026, 3, 2, 21, 58))
	steps = drive(p, &s2, w, at(be, 2026, 3, 2, 22, 0), at(be, 2026, 3, 3, 20, 0), time.Minute)
	if len(steps) != 1 || steps[0].d.Do != Lend || !steps[0].at.Equal(at(be, 2026, 3, 3, 19, 0)) {
		t.Errorf("after a reclaim with notice:\n%s want a lend at Tue 19:00", describe(steps))
	}
}

func TestLendUntil(t *testing.T) {
	be := zone(t, "Europe/Berlin")
	p := policy(t, Config{LendWindows: []string{"Mon-Fri 19:00-08:00"}, LendTZ: "Europe/Berlin"})
	w := world{gpu: func(time.Time) []GPUProcess { return nil }}
	now := at(be, 2026, 3, 3, 14, 0)

	// Outside the windows, until 18:00: reclaimed at 18:00, announced at
	// 17:50, then lent again when the window opens.
	var s State
	s, d, err := p.Lend(s, at(be, 2026, 3, 3, 18, 0), now)
	if err != nil || d.Do != Lend {
		t.Fatalf("lend --until 18:00: %s, %v", d, err)
	}
	steps := drive(p, &s, w, now, at(be, 2026, 3, 3, 19, 30), time.Minute)
	if len(steps) != 2 || steps[0].d.Do != Reclaim || !steps[0].at.Equal(at(be, 2026, 3, 3, 17, 50)) ||
		steps[0].d.Reason != "lending ends 18:00 (reclaimnet lend --until)" || steps[1].d.Do != Lend || !steps[1].at.Equal(at(be, 2026, 3, 3, 19, 0)) {
		t.Errorf("lend --until 18:00:\n%s want a reclaim at 17:50, a lend at 19:00", describe(steps))
	}

	// Until 20:00 runs into the window: one stretch to Wednesday 08:00.
	s = State{}
	s, _, err = p.Lend(s, at(be, 2026, 3, 3, 20, 0), now)
	if err != nil {
		t.Fatal(err)
	}
	steps = drive(p, &s, w, now, at(be, 2026, 3, 4, 9, 0), time.Minute)
	if len(steps) != 1 || steps[0].d.Do != Reclaim || !steps[0].at.Equal(at(be, 2026, 3, 4, 7, 50)) || steps[0].d.Reason != "lending window ends 08:00" {
		t.Errorf("lend --until 20:00:\n%s want only a reclaim at Wed 07:50", describe(steps))
	}

	// A lend withdraws a pending reclaim.
	s = State{}
	drive(p, &s, w, at(be, 2026, 3, 3, 19, 0), at(be, 2026, 3, 4, 7, 55), time.Minute)
	if s.Phase != PhaseReclaiming {
		t.Fatalf("phase %q at 07:55, want reclaiming", s.Phase)
	}
	s, d, err = p.Lend(s, at(be, 2026, 3, 4, 12, 0), at(be, 2026, 3, 4, 7, 55))
	if err != nil || d.Do != Lend || s.Phase != PhaseLent {
		t.Errorf("lend during the notice: %s, %v, phase %q", d, err, s.Phase)
	}

	for _, tc := range []struct {
		name       string
		now, until time.Time
		want       string
	}{
		{"until within the lead", now, at(be, 2026, 3, 3, 14, 5), "not more than the lead time"},
		{"until in the past", now, at(be, 2026, 3, 3, 13, 0), "not more than the lead time"},
		{"the window ends within the lead", at(be, 2026, 3, 4, 7, 55), time.Time{}, "within the lead time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := p.Lend(State{}, tc.until, tc.now)
			if !errors.Is(err, ErrCannotLend) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrCannotLend saying %q", err, tc.want)
			}
		})
	}
}

// The owner who types lend at the keyboard keeps using the machine: input
// does not end that lend until the owner has been idle once.
func TestManualLendWhileOwnerPresent(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	p := policy(t, Config{LendTZ: "UTC", Input: "notice 2m"})
	typing := func(now time.Time) bool {
		return now.Before(t0.Add(20*time.Minute)) || !now.Before(t0.Add(50*time.Minute))
	}
	w := world{input: func(now time.Time) time.Time {
		if typing(now) {
			return now
		}
		return t0.Add(20 * time.Minute)
	}}
	var s State
	if steps := drive(p, &s, w, t0, t0.Add(time.Minute), 10*time.Second); len(steps) != 0 {
		t.Fatalf("the owner is typing:\n%s want no lend", describe(steps))
	}
	s, d, err := p.Lend(s, time.Time{}, t0.Add(time.Minute))
	if err != nil || d.Do != Lend {
		t.Fatalf("lend: %s, %v", d, err)
	}
	steps := drive(p, &s, w, t0.Add(time.Minute), t0.Add(time.Hour), 10*time.Second)
	if len(steps) != 1 || steps[0].d.Do != Reclaim || !steps[0].at.Equal(t0.Add(50*time.Minute)) || steps[0].d.Kind != KindInput {
		t.Errorf("decisions:\n%s want one reclaim at 09:50, when the owner is back after being idle", describe(steps))
	}
}

// A pending reclaim with a notice becomes an emergency when an activity
// mapped to now happens; the owner's own reclaim keeps its notice.
func TestEscalateToNow(t *testing.T) {
	be := zone(t, "Europe/Berlin")
	p := policy(t, Config{LendWindows: []string{"Mon-Fri 19:00-08:00"}, LendTZ: "Europe/Berlin", GPU: "now"})
	owner := at(be, 2026, 3, 3, 7, 55)
	w := world{gpu: func(now time.Time) []GPUProcess {
		if !now.Before(owner) {
			return []GPUProcess{{PID: 4242, GPU: 0}}
		}
		return nil
	}}
	var s State
	steps := drive(p, &s, w, at(be, 2026, 3, 2, 19, 0), at(be, 2026, 3, 3, 8, 0), time.Minute)
	if len(steps) != 3 || steps[1].d.Do != Reclaim || steps[1].d.Now || steps[2].d.Do != Reclaim || !steps[2].d.Now ||
		!steps[2].at.Equal(owner) || steps[2].d.Reason != "owner process 4242 on GPU 0" {
		t.Fatalf("decisions:\n%s want lend, reclaim with notice, reclaim now at 07:55", describe(steps))
	}

	var s2 State
	drive(p, &s2, world{gpu: w.gpu}, at(be, 2026, 3, 2, 19, 0), at(be, 2026, 3, 2, 20, 0), time.Minute)
	s2 = p.OwnerReclaimed(s2, owner.Add(time.Minute), owner.Add(-5*time.Minute))
	if steps := drive(p, &s2, w, owner.Add(-5*time.Minute), owner.Add(2*time.Minute), time.Minute); len(steps) != 0 {
		t.Errorf("owner's reclaim with notice:\n%s want it left as it is", describe(steps))
	}
}

// Input from before lending began does not end it; an activity whose
// source failed neither ends nor blocks lending.
func TestStaleAndUnknownActivity(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	p := policy(t, Config{LendTZ: "UTC", Input: "now", Idle: Duration(time.Minute)})
	var s State
	s, d := p.Decide(s, Observations{Input: Input{At: t0.Add(-time.Hour)}, InputKnown: true}, t0)
	if d.Do != Lend {
		t.Fatalf("%s, want lend", d)
	}
	s, d = p.Decide(s, Observations{Input: Input{At: t0.Add(-time.Hour)}, InputKnown: true}, t0.Add(time.Minute))
	if d.Do != Nothing {
		t.Errorf("%s after old input, want nothing", d)
	}
	s, d = p.Decide(s, Observations{Problems: []string{"input: no device"}}, t0.Add(2*time.Minute))
	if d.Do != Nothing || s.Phase != PhaseLent || !slices.Equal(s.Problems, []string{"input: no device"}) {
		t.Errorf("%s, phase %q, problems %q after a failing source, want nothing, lent, the problem kept", d, s.Phase, s.Problems)
	}
	_, d = p.Decide(s, Observations{Input: Input{Active: true, Via: "login manager's idle hint"}, InputKnown: true}, t0.Add(3*time.Minute))
	if d.Do != Reclaim || !d.Now || d.Reason != "owner active now (login manager's idle hint)" {
		t.Errorf("%s, want reclaim now: owner active now", d)
	}
}

// Decide returns a new state and leaves its argument as it was.
func TestDecideLeavesItsArgument(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	p := policy(t, Config{LendTZ: "UTC"})
	s := State{Phase: PhaseLent, Since: t0, Reclaims: make([]time.Time, 1, 8)}
	s.Reclaims[0] = t0
	before := slices.Clone(s.Reclaims)
	after, d := p.Decide(s, Observations{GPU: []GPUProcess{{PID: 1}}, GPUKnown: true}, t0.Add(time.Minute))
	if d.Do != Reclaim || len(after.Reclaims) != 2 {
		t.Fatalf("%s, reclaims %v", d, after.Reclaims)
	}
	if !slices.Equal(s.Reclaims[:cap(s.Reclaims)][:2], append(before, time.Time{})) || s.Phase != PhaseLent {
		t.Errorf("the argument changed: %+v", s)
	}
}

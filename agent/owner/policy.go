package owner

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrCannotLend is wrapped by the errors Policy.Lend returns.
var ErrCannotLend = errors.New("cannot lend")

// rateWindow is the span the reclaim cap counts over.
const rateWindow = time.Hour

// Policy is a validated owner policy (Config.Policy). It holds no state:
// State does, and every operation takes the time as an argument.
type Policy struct {
	Schedule *Schedule
	// Lead is the notice of a window's end.
	Lead time.Duration
	// GPU, Input and CPU are what each activity does.
	GPU, Input, CPU Action
	// InputSource is where input is read (InputAuto, ...).
	InputSource string
	// CPUThreshold (cores) and CPUFor: the owner's load that counts.
	CPUThreshold float64
	CPUFor       time.Duration
	// Idle is the owner's idle time before lending again.
	Idle time.Duration
	// MaxReclaimsPerHour caps activity reclaims in any hour.
	MaxReclaimsPerHour int
}

// Phase is where the machine stands in the lending cycle.
type Phase string

const (
	// PhaseUnlent: not lent (the zero State is unlent: an agent that
	// starts lends only once the policy allows it).
	PhaseUnlent Phase = ""
	// PhaseLent: guests may run here.
	PhaseLent Phase = "lent"
	// PhaseReclaiming: a reclaim with a notice is under way; the guests
	// leave by State.Deadline.
	PhaseReclaiming Phase = "reclaiming"
)

// State is one machine's lending state. The zero State is a machine that
// was never lent. It is plain data (JSON), so the agent can keep it across
// restarts: the hourly cap and an owner's reclaim then survive them.
type State struct {
	Phase Phase `json:"phase,omitempty"`
	// Since is when the phase began.
	Since time.Time `json:"since,omitzero"`
	// Kind and Reason say why the phase began (a reclaim's cause, what
	// allowed lending).
	Kind   Kind   `json:"kind,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Deadline is the pending reclaim's deadline; Emergency that it
	// became (or was) a reclaim at once.
	Deadline  time.Time `json:"deadline,omitzero"`
	Emergency bool      `json:"emergency,omitempty"`

	// OwnerHold: the owner took the machine back by hand; nothing lends
	// it until the owner lends it or HoldUntil (the start of the next
	// lending window; zero: only the owner).
	OwnerHold bool      `json:"owner_hold,omitempty"`
	HoldUntil time.Time `json:"hold_until,omitzero"`
	// LendUntil is the end of the owner's lend, lendable time added to
	// the windows.
	LendUntil time.Time `json:"lend_until,omitzero"`
	// Present: the owner lent by hand and has not been idle since, so
	// input and CPU load do not end lending (a GPU process still does).
	Present bool `json:"present,omitempty"`
	// Watch is when input began to count: input at or before it does not
	// end lending (the phase's start, or the end of Present).
	Watch time.Time `json:"watch,omitzero"`

	// LastActive is the last owner activity seen, LastActiveWhy what it
	// was.
	LastActive    time.Time `json:"last_active,omitzero"`
	LastActiveWhy string    `json:"last_active_why,omitempty"`
	// CPUHighSince is when the owner's load last rose above the
	// threshold (zero while below it).
	CPUHighSince time.Time `json:"cpu_high_since,omitzero"`
	// Reclaims are the activity reclaims of the last hour.
	Reclaims []time.Time `json:"reclaims,omitempty"`
	// Problems are the sources' errors in the last round.
	Problems []string `json:"problems,omitempty"`
}

// Do is what a Decision asks of the agent.
type Do int

const (
	// Nothing: keep going as is.
	Nothing Do = iota
	// Lend: withdraw any pending reclaim, set the kill-switch off and
	// take guests again.
	Lend
	// Reclaim: take the machine back, with Decision.Notice (the same as
	// reclaimnet reclaim --notice) or at once (Decision.Now, as
	// reclaimnet reclaim --now).
	Reclaim
)

func (d Do) String() string {
	switch d {
	case Lend:
		return "lend"
	case Reclaim:
		return "reclaim"
	}
	return "nothing"
}

// Decision is what the agent should do now, and why.
type Decision struct {
	Do Do
	// Now: an emergency reclaim; else Notice is the reclaim's notice and
	// Deadline when it ends.
	Now      bool
	Notice   time.Duration
	Deadline time.Time
	Kind     Kind
	// Reason is the line the owner's report and the history show
	// ("lending window ends 08:00", "owner process 4242 on GPU 0").
	Reason string
}

func (d Decision) String() string {
	switch {
	case d.Do == Reclaim && d.Now:
		return "reclaim now: " + d.Reason
	case d.Do == Reclaim:
		return fmt.Sprintf("reclaim with notice %v: %s", d.Notice, d.Reason)
	case d.Do == Lend:
		return "lend: " + d.Reason
	}
	return "nothing"
}

// GPUProcess is an owner's process on a lent GPU.
type GPUProcess struct {
	PID int `json:"pid"`
	GPU int `json:"gpu"`
	// Name is the process's command name, when known.
	Name string `json:"name,omitempty"`
}

// Input is the console's last input.
type Input struct {
	// At is the last input seen (zero: none seen).
	At time.Time
	// Active: the source says the owner is active now (a login session
	// that is not idle) without a time.
	Active bool
	// Via names the source ("input device event3", "login manager").
	Via string
}

// CPULoad is the owner's CPU load over the last sample.
type CPULoad struct {
	// Cores is the CPU time of processes that are not guests' per second.
	Cores float64
	// TopPID and TopName are the busiest such process.
	TopPID  int
	TopName string
}

// Observations are one round of the activity sources. A kind whose
// Known is false is not watched or its source failed; it neither ends nor
// blocks lending.
type Observations struct {
	GPU        []GPUProcess
	GPUKnown   bool
	Input      Input
	InputKnown bool
	CPU        CPULoad
	CPUKnown   bool
	// Problems are the sources' errors, in words.
	Problems []string
}

// trigger is one activity that ends lending.
type trigger struct {
	kind   Kind
	act    Action
	reason string
}

// Decide returns the state after one round of observations at now, and
// what the agent should do. The agent calls it every few seconds.
//
// While lent, the owner's activity ends lending with its action (the
// strongest one when several fire: now before any notice, then the
// shortest notice), and Lead before the lendable time ends a reclaim
// with the remaining notice is announced. While a reclaim with a notice
// is pending, an activity mapped to now turns it into an emergency. While
// unlent, the machine is lent again once it is in lendable time that
// lasts longer than Lead, the owner has been idle for Idle, fewer than
// MaxReclaimsPerHour activity reclaims happened in the last hour, and no
// reclaim of the owner holds it back.
func (p *Policy) Decide(s State, o Observations, now time.Time) (State, Decision) {
	s.Reclaims = slices.Clone(s.Reclaims)
	s.Problems = slices.Clone(o.Problems)
	trig := p.observe(&s, o, now)
	p.expire(&s, now)

	switch s.Phase {
	case PhaseLent:
		if t, ok := strongest(trig); ok {
			return p.activityReclaim(s, t, now)
		}
		end, byLend, lendable := p.lendEnd(s, now)
		if !lendable || (!end.IsZero() && !now.Before(end.Add(-p.Lead))) {
			return p.scheduledReclaim(s, end, byLend, lendable, now)
		}
		return s, Decision{}
	case PhaseReclaiming:
		// The owner's own reclaim keeps the notice the owner gave.
		if t, ok := strongest(trig); ok && t.act.Now && !s.Emergency && s.Kind != KindOwner {
			s.Emergency = true
			s.Deadline = now
			s.Reason = t.reason
			s.Kind = t.kind
			return s, Decision{Do: Reclaim, Now: true, Deadline: now, Kind: t.kind, Reason: t.reason}
		}
		return s, Decision{}
	}
	if st, _ := p.blocked(s, now); st != "" {
		return s, Decision{}
	}
	end, _, _ := p.lendEnd(s, now)
	reason := "lendable " + p.untilWords(end, now)
	if p.watching() {
		reason += ", owner idle"
		if !s.LastActive.IsZero() {
			reason += " since " + p.clock(s.LastActive, now)
		}
	}
	s = State{
		Phase:         PhaseLent,
		Since:         now,
		Watch:         now,
		Kind:          KindWindow,
		Reason:        reason,
		LendUntil:     s.LendUntil,
		LastActive:    s.LastActive,
		LastActiveWhy: s.LastActiveWhy,
		CPUHighSince:  s.CPUHighSince,
		Reclaims:      s.Reclaims,
		Problems:      s.Problems,
	}
	return s, Decision{Do: Lend, Kind: KindWindow, Reason: reason}
}

// observe folds the observations into the activity record and returns
// the activities that end lending now.
func (p *Policy) observe(s *State, o Observations, now time.Time) []trigger {
	var trig []trigger
	// Input and CPU load end lending once it began (or a reclaim was
	// announced), unless the owner who lent by hand is still around.
	watched := (s.Phase == PhaseLent || s.Phase == PhaseReclaiming) && !s.Present
	active := func(at time.Time, why string) {
		if !at.Before(s.LastActive) {
			s.LastActive, s.LastActiveWhy = at, why
		}
	}
	if o.GPUKnown && !p.GPU.Off() && len(o.GPU) > 0 {
		why := gpuWords(o.GPU)
		active(now, why)
		trig = append(trig, trigger{KindGPU, p.GPU, why})
	}
	if o.InputKnown && !p.Input.Off() {
		at := o.Input.At
		if o.Input.Active {
			at = now
		}
		if !at.IsZero() {
			why := "owner input at " + p.clock(at, now)
			if o.Input.Active {
				why = "owner active now"
			}
			if o.Input.Via != "" {
				why += " (" + o.Input.Via + ")"
			}
			active(at, why)
			if watched && at.After(s.Watch) {
				trig = append(trig, trigger{KindInput, p.Input, why})
			}
		}
	}
	if o.CPUKnown && !p.CPU.Off() {
		if o.CPU.Cores > p.CPUThreshold {
			if s.CPUHighSince.IsZero() {
				s.CPUHighSince = now
			}
			words := func(lasted string) string {
				w := fmt.Sprintf("owner CPU load %.1f cores%s, above %.1f", o.CPU.Cores, lasted, p.CPUThreshold)
				if o.CPU.TopPID > 0 {
					w += fmt.Sprintf(" (busiest: process %d %s)", o.CPU.TopPID, o.CPU.TopName)
				}
				return w
			}
			active(now, words(""))
			if lasted := now.Sub(s.CPUHighSince); watched && lasted >= p.CPUFor {
				trig = append(trig, trigger{KindCPU, p.CPU, words(" for " + lasted.Round(time.Second).String())})
			}
		} else {
			s.CPUHighSince = time.Time{}
		}
	}
	if s.Present && now.Sub(s.LastActive) >= p.Idle {
		s.Present, s.Watch = false, now
	}
	return trig
}

// expire ends what time ends: a reclaim's notice, the owner's hold and
// lend, reclaims older than an hour.
func (p *Policy) expire(s *State, now time.Time) {
	if s.Phase == PhaseReclaiming && !now.Before(s.Deadline) {
		s.Phase = PhaseUnlent
		s.Since = s.Deadline
	}
	if s.OwnerHold && !s.HoldUntil.IsZero() && !now.Before(s.HoldUntil) {
		s.OwnerHold, s.HoldUntil = false, time.Time{}
	}
	if !s.LendUntil.IsZero() && !now.Before(s.LendUntil) {
		s.LendUntil = time.Time{}
	}
	s.Reclaims = slices.DeleteFunc(s.Reclaims, func(t time.Time) bool { return !now.Before(t.Add(rateWindow)) })
}

// strongest picks the trigger whose action is hardest: now, else the
// shortest notice.
func strongest(ts []trigger) (trigger, bool) {
	if len(ts) == 0 {
		return trigger{}, false
	}
	best := ts[0]
	for _, t := range ts[1:] {
		if t.act.Now && !best.act.Now || !best.act.Now && !t.act.Now && t.act.Notice < best.act.Notice {
			best = t
		}
	}
	return best, true
}

func (p *Policy) activityReclaim(s State, t trigger, now time.Time) (State, Decision) {
	s.Reclaims = append(s.Reclaims, now)
	s.Present = false
	s.Kind, s.Reason = t.kind, t.reason
	if t.act.Now {
		s.Phase, s.Since, s.Watch, s.Deadline, s.Emergency = PhaseUnlent, now, now, now, true
		return s, Decision{Do: Reclaim, Now: true, Deadline: now, Kind: t.kind, Reason: t.reason}
	}
	deadline := now.Add(t.act.Notice)
	if end, _, ok := p.lendEnd(s, now); ok && !end.IsZero() && end.Before(deadline) {
		deadline = end
	}
	s.Phase, s.Since, s.Watch, s.Deadline, s.Emergency = PhaseReclaiming, now, now, deadline, false
	return s, Decision{Do: Reclaim, Notice: deadline.Sub(now), Deadline: deadline, Kind: t.kind, Reason: t.reason}
}

func (p *Policy) scheduledReclaim(s State, end time.Time, byLend, lendable bool, now time.Time) (State, Decision) {
	s.Kind = KindWindow
	s.Present = false
	if !lendable || !now.Before(end) {
		s.Reason = "outside the lending windows"
		if lendable {
			s.Reason = p.endWords(end, byLend, now, "ended")
		}
		s.Phase, s.Since, s.Watch, s.Deadline, s.Emergency = PhaseUnlent, now, now, now, true
		return s, Decision{Do: Reclaim, Now: true, Deadline: now, Kind: KindWindow, Reason: s.Reason}
	}
	s.Reason = p.endWords(end, byLend, now, "ends")
	s.Phase, s.Since, s.Watch, s.Deadline, s.Emergency = PhaseReclaiming, now, now, end, false
	return s, Decision{Do: Reclaim, Notice: end.Sub(now), Deadline: end, Kind: KindWindow, Reason: s.Reason}
}

// endWords is "lending window ends 08:00" or, for the owner's lend,
// "lending ends 18:00 (reclaimnet lend --until)".
func (p *Policy) endWords(end time.Time, byLend bool, now time.Time, verb string) string {
	if byLend {
		return "lending " + verb + " " + p.clock(end, now) + " (reclaimnet lend --until)"
	}
	return "lending window " + verb + " " + p.clock(end, now)
}

// lendEnd returns when the lendable time around now ends (zero: never)
// and whether the owner's lend ends it; lendable is false when now is not
// lendable. Lendable time is the windows and the owner's lend together.
func (p *Policy) lendEnd(s State, now time.Time) (end time.Time, byLend, lendable bool) {
	t := now
	for {
		if iv, in := p.Schedule.At(t); in {
			if iv.End.IsZero() {
				return time.Time{}, false, true
			}
			t, byLend, lendable = iv.End, false, true
			continue
		}
		if !s.LendUntil.IsZero() && t.Before(s.LendUntil) {
			t, byLend, lendable = s.LendUntil, true, true
			continue
		}
		return t, byLend, lendable
	}
}

// blocked says why the machine may not be lent now: the state it is in
// and the words ("" when it may be lent).
func (p *Policy) blocked(s State, now time.Time) (NodeState, string) {
	if s.OwnerHold {
		why := "reclaimed by the owner (reclaimnet reclaim); lent again by reclaimnet lend"
		if !s.HoldUntil.IsZero() {
			why += " or when the next lending window opens " + p.clock(s.HoldUntil, now)
		}
		return StateReclaimed, why
	}
	end, _, lendable := p.lendEnd(s, now)
	if !lendable {
		return StateOutside, "outside the lending windows"
	}
	if !end.IsZero() && end.Sub(now) <= p.Lead {
		return StateOutside, fmt.Sprintf("the lending window ends %s, within the %v notice", p.clock(end, now), p.Lead)
	}
	if n := len(s.Reclaims); n >= p.MaxReclaimsPerHour {
		return StateRateLimited, fmt.Sprintf("%d automatic reclaims in the last hour (at most %d)", n, p.MaxReclaimsPerHour)
	}
	// Activity seen this round blocks lending even with no idle time.
	if !s.LastActive.IsZero() && (now.Sub(s.LastActive) < p.Idle || !s.LastActive.Before(now)) {
		why, seen := s.LastActiveWhy, p.clock(s.LastActive, now)
		if !strings.Contains(why, seen) {
			why += ", last seen " + seen
		}
		return StateOwnerActive, why
	}
	return "", ""
}

// watching reports whether any activity is watched.
func (p *Policy) watching() bool { return !p.GPU.Off() || !p.Input.Off() || !p.CPU.Off() }

// untilWords is "until 08:00" or "with no end".
func (p *Policy) untilWords(end, now time.Time) string {
	if end.IsZero() {
		return "with no end"
	}
	return "until " + p.clock(end, now)
}

// Lend is the owner's reclaimnet lend at now. With a zero until it lends
// now and follows the schedule from here: to the end of the current
// window or, outside the windows, to the end of the next one. With until,
// the time up to until is lendable too (it adds to the windows and never
// shortens one). Lend withdraws the owner's reclaim and the hourly cap,
// and while the owner stays active input and CPU load do not end it.
func (p *Policy) Lend(s State, until, now time.Time) (State, Decision, error) {
	s.Reclaims = nil
	s.OwnerHold, s.HoldUntil = false, time.Time{}
	switch {
	case !until.IsZero():
		if !until.After(now.Add(p.Lead)) {
			return State{}, Decision{}, fmt.Errorf("%w until %s: that is not more than the lead time (%v) away", ErrCannotLend, p.clock(until, now), p.Lead)
		}
		if until.After(s.LendUntil) {
			s.LendUntil = until
		}
	default:
		if _, in := p.Schedule.At(now); !in {
			next, ok := p.Schedule.Next(now)
			if !ok {
				return State{}, Decision{}, fmt.Errorf("%w: no lending window lies ahead; give an end with --until", ErrCannotLend)
			}
			s.LendUntil = next.Start
		}
	}
	end, _, _ := p.lendEnd(s, now)
	if !end.IsZero() && end.Sub(now) <= p.Lead {
		return State{}, Decision{}, fmt.Errorf("%w: the lending window ends %s, within the lead time (%v); give a later end with --until", ErrCannotLend, p.clock(end, now), p.Lead)
	}
	reason := "lent by the owner (reclaimnet lend) " + p.untilWords(end, now)
	s.Phase, s.Since, s.Watch, s.Kind, s.Reason = PhaseLent, now, now, KindOwner, reason
	s.Deadline, s.Emergency = time.Time{}, false
	s.Present = true
	return s, Decision{Do: Lend, Kind: KindOwner, Reason: reason}, nil
}

// ParseUntil reads lend --until: "18:00" (the next time the clock in the
// schedule's zone reads it), "Fri 18:00" (that day's, this week or next),
// a duration from now ("3h"), or an RFC 3339 time.
func (p *Policy) ParseUntil(v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("until %q: want a positive duration", v)
		}
		return now.Add(d), nil
	}
	day, clk, hasDay := strings.Cut(v, " ")
	if !hasDay {
		day, clk = "", v
	}
	minute, err := parseClock(strings.TrimSpace(clk))
	if err != nil {
		return time.Time{}, fmt.Errorf("until %q: want HH:MM, DAY HH:MM, a duration like 3h or an RFC 3339 time: %w", v, err)
	}
	if !hasDay {
		return nextClock(now, minute, p.Schedule.Location()), nil
	}
	wd, err := parseDay(day)
	if err != nil {
		return time.Time{}, fmt.Errorf("until %q: %w", v, err)
	}
	loc := p.Schedule.Location()
	y, m, d := now.In(loc).Date()
	for i := 0; ; i++ {
		date := time.Date(y, m, d+i, 12, 0, 0, 0, time.UTC)
		if t := boundary(y, m, d+i, minute, loc); date.Weekday() == wd && t.After(now) {
			return t, nil
		}
	}
}

// OwnerReclaimed records the owner's reclaimnet reclaim at now, its
// deadline at now for --now. It overrides everything: the machine is not
// lent again until the owner lends it or the next lending window begins
// (with no windows, only the owner's lend ends it).
func (p *Policy) OwnerReclaimed(s State, deadline, now time.Time) State {
	s.OwnerHold, s.HoldUntil = true, time.Time{}
	if !p.Schedule.Always() {
		if next, ok := p.Schedule.Next(deadline); ok {
			s.HoldUntil = next.Start
		}
	}
	s.LendUntil, s.Present = time.Time{}, false
	s.Kind, s.Reason = KindOwner, "reclaimed by the owner (reclaimnet reclaim)"
	s.Since, s.Watch, s.Deadline, s.Emergency = now, now, deadline, !deadline.After(now)
	s.Phase = PhaseReclaiming
	if s.Emergency {
		s.Phase = PhaseUnlent
	}
	return s
}

// clock writes t for the owner: "08:00" on now's day, "Sat 08:00" within
// a week, else "2026-03-01 08:00", in the schedule's zone.
func (p *Policy) clock(t, now time.Time) string {
	loc := p.Schedule.Location()
	lt, ln := t.In(loc), now.In(loc)
	y1, m1, d1 := lt.Date()
	y2, m2, d2 := ln.Date()
	switch {
	case y1 == y2 && m1 == m2 && d1 == d2:
		if lt.Second() != 0 {
			return lt.Format("15:04:05")
		}
		return lt.Format("15:04")
	case t.After(now) && t.Sub(now) < 6*24*time.Hour, now.After(t) && now.Sub(t) < 6*24*time.Hour:
		return lt.Format("Mon 15:04")
	}
	return lt.Format("2006-01-02 15:04")
}

// gpuWords is "owner process 4242 (python3) on GPU 0", naming the first
// of several ("and 2 more").
func gpuWords(ps []GPUProcess) string {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b GPUProcess) int {
		if a.GPU != b.GPU {
			return a.GPU - b.GPU
		}
		return a.PID - b.PID
	})
	w := fmt.Sprintf("owner process %d", ps[0].PID)
	if ps[0].Name != "" {
		w += " (" + ps[0].Name + ")"
	}
	w += fmt.Sprintf(" on GPU %d", ps[0].GPU)
	if len(ps) > 1 {
		w += fmt.Sprintf(" and %d more", len(ps)-1)
	}
	return w
}

// String describes the policy in force, one line per part.
func (p *Policy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lending windows: %s; a window's end gives a %v notice\n", p.Schedule, p.Lead)
	fmt.Fprintf(&b, "owner activity: gpu %s, input %s (%s), cpu %s (above %.1f cores for %v)\n",
		p.GPU, p.Input, p.InputSource, p.CPU, p.CPUThreshold, p.CPUFor)
	fmt.Fprintf(&b, "lend again after the owner is idle %v; at most %d automatic reclaims an hour", p.Idle, p.MaxReclaimsPerHour)
	return b.String()
}

// ReclaimCancelled records that the owner withdrew the pending reclaim at
// now (reclaimnet reclaim --cancel): the machine stays lent, and an
// owner's hold ends with it.
func (p *Policy) ReclaimCancelled(s State, now time.Time) State {
	if s.Phase != PhaseReclaiming {
		return s
	}
	s.OwnerHold, s.HoldUntil = false, time.Time{}
	s.Phase, s.Since, s.Watch = PhaseLent, now, now
	s.Kind, s.Reason = KindOwner, "lent: the owner cancelled the reclaim (reclaimnet reclaim --cancel)"
	s.Deadline, s.Emergency = time.Time{}, false
	return s
}

package owner

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// NodeState is the machine's lending state as the owner, the status page
// and other nodes see it.
type NodeState string

const (
	StateLent        NodeState = "lent"
	StateReclaiming  NodeState = "reclaiming"
	StateOwnerActive NodeState = "owner active"
	// StateReclaimed: the owner's reclaim holds the machine back.
	StateReclaimed NodeState = "reclaimed"
	// StateOutside: outside the lending windows (or too close to a
	// window's end to lend).
	StateOutside     NodeState = "outside window"
	StateRateLimited NodeState = "rate limited"
	// StateIdle: not lent, and nothing stops lending: the next Decide
	// lends.
	StateIdle NodeState = "not lent"
)

// Planned is a planned reclaim or lend.
type Planned struct {
	// At is the reclaim's deadline, or the earliest time lending may
	// begin.
	At time.Time `json:"at"`
	// Announce is when a reclaim's notice is (or was) announced.
	Announce time.Time `json:"announce,omitzero"`
	Reason   string    `json:"reason"`
}

// Status is what reclaimnet lend --status shows: the policy in force,
// whether the machine is lent and why, and what comes next.
type Status struct {
	Policy string    `json:"policy"`
	State  NodeState `json:"state"`
	Lent   bool      `json:"lent"`
	Why    string    `json:"why"`
	// Since is when the state began (lent since, reclaiming since).
	Since time.Time `json:"since,omitzero"`
	// NextReclaim is the reclaim the schedule plans (or the one under
	// way); nil when none is known.
	NextReclaim *Planned `json:"next_reclaim,omitempty"`
	// NextLend is the earliest time lending may begin again, if the
	// owner stays idle; nil when only the owner's lend can start it.
	NextLend *Planned `json:"next_lend,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

// Status reports the state at now.
func (p *Policy) Status(s State, now time.Time) Status {
	s.Reclaims = slices.Clone(s.Reclaims)
	p.expire(&s, now)
	st := Status{Policy: p.String(), Since: s.Since, Problems: s.Problems}
	switch s.Phase {
	case PhaseLent:
		st.State, st.Lent, st.Why = StateLent, true, s.Reason
		if end, byLend, ok := p.lendEnd(s, now); ok && !end.IsZero() {
			st.NextReclaim = &Planned{At: end, Announce: end.Add(-p.Lead), Reason: p.endWords(end, byLend, now, "ends")}
		}
	case PhaseReclaiming:
		st.State, st.Lent, st.Why = StateReclaiming, true, s.Reason
		st.NextReclaim = &Planned{At: s.Deadline, Announce: s.Since, Reason: s.Reason}
		st.NextLend = p.nextLend(s, s.Deadline, "the reclaim's deadline passes")
	default:
		st.State, st.Why = p.blocked(s, now)
		if st.State == "" {
			st.State, st.Why = StateIdle, "lendable: lends at the next check"
		}
		st.NextLend = p.nextLend(s, now, "lendable now")
	}
	return st
}

// nextLend returns the earliest time from t on at which Decide could lend
// (the owner staying idle), with what it waits for (why, if nothing else).
func (p *Policy) nextLend(s State, t time.Time, why string) *Planned {
	later := func(at time.Time, because string) {
		if at.After(t) {
			t, why = at, because
		}
	}
	if s.OwnerHold {
		if s.HoldUntil.IsZero() {
			return nil
		}
		later(s.HoldUntil, "the next lending window opens")
	}
	if n := len(s.Reclaims); n >= p.MaxReclaimsPerHour {
		later(s.Reclaims[n-p.MaxReclaimsPerHour].Add(rateWindow), "the hourly cap on automatic reclaims allows it")
	}
	if !s.LastActive.IsZero() {
		later(s.LastActive.Add(p.Idle), fmt.Sprintf("the owner has been idle %v", p.Idle))
	}
	// Lendable time that lasts more than the lead; windows repeat weekly,
	// so a few steps find it when there is one.
	for range 2 * horizon {
		end, _, lendable := p.lendEnd(s, t)
		if lendable && (end.IsZero() || end.Sub(t) > p.Lead) {
			return &Planned{At: t, Reason: why}
		}
		next, ok := p.Schedule.Next(t)
		if !ok {
			return nil
		}
		t, why = next.Start, "the next lending window opens"
	}
	return nil
}

// String is the status as reclaimnet lend --status prints it.
func (st Status) String() string {
	var b strings.Builder
	b.WriteString("policy:\n")
	for line := range strings.SplitSeq(st.Policy, "\n") {
		b.WriteString("  " + line + "\n")
	}
	fmt.Fprintf(&b, "state: %s: %s", st.State, st.Why)
	if !st.Since.IsZero() {
		fmt.Fprintf(&b, " (since %s)", stamp(st.Since))
	}
	b.WriteString("\n")
	if r := st.NextReclaim; r != nil {
		fmt.Fprintf(&b, "next planned reclaim: %s (notice from %s): %s\n", stamp(r.At), stamp(r.Announce), r.Reason)
	} else if st.Lent {
		b.WriteString("next planned reclaim: none (no lending window ends)\n")
	}
	if l := st.NextLend; l != nil {
		fmt.Fprintf(&b, "lendable again: %s, when %s\n", stamp(l.At), l.Reason)
	} else if !st.Lent {
		b.WriteString("lendable again: only by reclaimnet lend\n")
	}
	for _, pr := range st.Problems {
		b.WriteString("problem: " + pr + "\n")
	}
	return b.String()
}

func stamp(t time.Time) string { return t.Format("Mon 2006-01-02 15:04:05 MST") }

// Outlook is the part of the status other nodes need: how long the
// machine stays lent, or from when it may be lent again.
func (st Status) Outlook() Outlook {
	o := Outlook{State: st.State}
	if st.Lent && st.NextReclaim != nil {
		o.Until = st.NextReclaim.At
	}
	if !st.Lent && st.NextLend != nil {
		o.From = st.NextLend.At
	}
	return o
}

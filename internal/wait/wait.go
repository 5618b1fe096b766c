// Package wait is the one way tests wait for a condition: poll it until it
// holds or a deadline passes, then fail the test with what was awaited and
// the condition's last word. It uses time.Sleep, so under testing/synctest
// it waits in fake time.
package wait

import (
	"testing"
	"time"
)

// Interval is how often a condition within d is polled: a hundredth of d,
// at least 5 ms and at most 250 ms (cheap checks in short waits are polled
// often; a campus-wide query in a two-minute wait is not).
func Interval(d time.Duration) time.Duration {
	return min(max(d/100, 5*time.Millisecond), 250*time.Millisecond)
}

// For polls cond until it returns true; if within passes first, t fails
// with "what: not within D".
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	ForWhy(t, within, what, func() (bool, string) { return cond(), "" })
}

// ForWhy polls cond until it returns true; if within passes first, t fails
// with "what: not within D (last: WHY)", WHY being the last non-empty
// reason cond gave.
func ForWhy(t testing.TB, within time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	last, ok := Until(within, cond)
	switch {
	case ok:
	case last != "":
		t.Fatalf("%s: not within %v (last: %s)", what, within, last)
	default:
		t.Fatalf("%s: not within %v", what, within)
	}
}

// Until polls cond until it returns true or within passes, and reports
// whether it held and the last non-empty reason it gave. For callers that
// decide themselves what a timeout means.
func Until(within time.Duration, cond func() (ok bool, why string)) (last string, ok bool) {
	return until(Interval(within), within, cond)
}

// ForEvery is For polling every interval instead of Interval(within): for
// a measurement whose timing is part of its result (when a poll sees the
// condition decides when the next step starts, or is the time measured).
// An interval of 0 polls without pause.
func ForEvery(t testing.TB, every, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if _, ok := until(every, within, func() (bool, string) { return cond(), "" }); !ok {
		t.Fatalf("%s: not within %v", what, within)
	}
}

func until(every, within time.Duration, cond func() (ok bool, why string)) (last string, ok bool) {
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return why, true
		}
		if why != "" {
			last = why
		}
		if !time.Now().Before(deadline) {
			return last, false
		}
		time.Sleep(every)
	}
}

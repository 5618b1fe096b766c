package wait

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		r := &recorder{TB: t}
		For(r, time.Minute, "third call", func() bool { calls++; return calls == 3 })
		if r.failed != "" {
			t.Fatalf("failed: %s", r.failed)
		}
		if calls != 3 {
			t.Fatalf("got %d calls, want 3", calls)
		}
		if got, want := time.Since(start), 2*Interval(time.Minute); got != want {
			t.Fatalf("waited %v of fake time, want %v (two intervals)", got, want)
		}
	})
}

func TestForWhyFailsWithTheLastReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		r := &recorder{TB: t}
		ForWhy(r, time.Second, "leader elected", func() (bool, string) {
			n++
			if n == 2 {
				return false, "2 of 3 nodes agree"
			}
			return false, ""
		})
		if !strings.HasPrefix(r.failed, "leader elected: not within 1s") || !strings.Contains(r.failed, "(last: 2 of 3 nodes agree)") {
			t.Fatalf("got failure %q", r.failed)
		}
	})
}

func TestInterval(t *testing.T) {
	for _, tc := range []struct{ d, want time.Duration }{
		{100 * time.Millisecond, 5 * time.Millisecond},
		{2 * time.Second, 20 * time.Millisecond},
		{10 * time.Minute, 250 * time.Millisecond},
	} {
		if got := Interval(tc.d); got != tc.want {
			t.Errorf("Interval(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}

func TestForEveryPollsAtItsInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		r := &recorder{TB: t}
		ForEvery(r, 10*time.Millisecond, 5*time.Minute, "fourth call", func() bool { calls++; return calls == 4 })
		if r.failed != "" {
			t.Fatalf("failed: %s", r.failed)
		}
		if got := time.Since(start); got != 30*time.Millisecond {
			t.Fatalf("waited %v of fake time, want 30ms (three 10 ms intervals)", got)
		}
		ForEvery(r, time.Second, 3*time.Second, "never", func() bool { return false })
		if !strings.HasPrefix(r.failed, "never: not within 3s") {
			t.Fatalf("got failure %q", r.failed)
		}
	})
}

package owner

import (
	"strings"
	"testing"
	"time"
)

func TestStatus(t *testing.T) {
	be := zone(t, "Europe/Berlin")
	p := policy(t, Config{LendWindows: []string{"Mon-Fri 19:00-08:00"}, LendTZ: "Europe/Berlin"})
	gpuAt := at(be, 2026, 3, 2, 21, 0)
	w := world{gpu: func(now time.Time) []GPUProcess {
		if !now.Before(gpuAt) && now.Before(gpuAt.Add(10*time.Minute)) {
			return []GPUProcess{{PID: 4242, GPU: 0}}
		}
		return nil
	}}
	var s State
	drive(p, &s, w, at(be, 2026, 3, 2, 18, 0), at(be, 2026, 3, 2, 20, 0), time.Minute)

	st := p.Status(s, at(be, 2026, 3, 2, 20, 0))
	if st.State != StateLent || !st.Lent || st.NextReclaim == nil ||
		!st.NextReclaim.At.Equal(at(be, 2026, 3, 3, 8, 0)) || !st.NextReclaim.Announce.Equal(at(be, 2026, 3, 3, 7, 50)) ||
		st.NextReclaim.Reason != "lending window ends Tue 08:00" {
		t.Errorf("lent: %+v, next reclaim %+v", st, st.NextReclaim)
	}
	text := st.String()
	for _, want := range []string{"lending windows: Mon-Fri 19:00-08:00 (Europe/Berlin)", "state: lent: lendable until Tue 08:00",
		"next planned reclaim: Tue 2026-03-03 08:00:00 CET (notice from Tue 2026-03-03 07:50:00 CET): lending window ends Tue 08:00"} {
		if !strings.Contains(text, want) {
			t.Errorf("status text lacks %q:\n%s", want, text)
		}
	}
	if o := st.Outlook(); o.State != StateLent || !o.Until.Equal(at(be, 2026, 3, 3, 8, 0)) || !o.From.IsZero() {
		t.Errorf("outlook %v", o)
	}

	// The owner's GPU process: reclaiming, then owner active until the
	// owner has been idle 15 minutes.
	drive(p, &s, w, at(be, 2026, 3, 2, 20, 0), gpuAt.Add(time.Minute), time.Minute)
	st = p.Status(s, gpuAt.Add(time.Minute))
	if st.State != StateReclaiming || !st.Lent || st.NextReclaim == nil || !st.NextReclaim.At.Equal(gpuAt.Add(2*time.Minute)) ||
		st.NextReclaim.Reason != "owner process 4242 on GPU 0" {
		t.Errorf("reclaiming: %+v, next reclaim %+v", st, st.NextReclaim)
	}
	if o := st.Outlook(); o.State != StateReclaiming || !o.Until.Equal(gpuAt.Add(2*time.Minute)) {
		t.Errorf("outlook while reclaiming %v", o)
	}
	drive(p, &s, w, gpuAt.Add(time.Minute), gpuAt.Add(5*time.Minute), time.Minute)
	st = p.Status(s, gpuAt.Add(5*time.Minute))
	lastSeen := gpuAt.Add(4 * time.Minute)
	if st.State != StateOwnerActive || st.Lent || !strings.Contains(st.Why, "owner process 4242 on GPU 0") ||
		st.NextLend == nil || !st.NextLend.At.Equal(lastSeen.Add(DefaultIdle)) || st.NextLend.Reason != "the owner has been idle 15m0s" {
		t.Errorf("owner active: %+v, next lend %+v", st, st.NextLend)
	}
	if o := st.Outlook(); o.State != StateOwnerActive || !o.From.Equal(lastSeen.Add(DefaultIdle)) || !o.Until.IsZero() {
		t.Errorf("outlook while the owner is active %v", o)
	}

	// Outside the windows: the next one.
	var out State
	st = p.Status(out, at(be, 2026, 3, 3, 12, 0))
	if st.State != StateOutside || st.NextLend == nil || !st.NextLend.At.Equal(at(be, 2026, 3, 3, 19, 0)) || st.NextLend.Reason != "the next lending window opens" {
		t.Errorf("outside: %+v, next lend %+v", st, st.NextLend)
	}

	// The owner's reclaim with no windows: only lend ends it.
	always := policy(t, Config{LendTZ: "UTC"})
	held := always.OwnerReclaimed(State{}, gpuAt, gpuAt)
	st = always.Status(held, gpuAt.Add(time.Hour))
	if st.State != StateReclaimed || st.NextLend != nil || !strings.Contains(st.String(), "lendable again: only by reclaimnet lend") {
		t.Errorf("held: %+v\n%s", st, st)
	}
	if o := st.Outlook(); o.State != StateReclaimed || !o.From.IsZero() {
		t.Errorf("outlook while held %v", o)
	}
}

func TestParseUntil(t *testing.T) {
	be := zone(t, "Europe/Berlin")
	p := policy(t, Config{LendTZ: "Europe/Berlin"})
	now := at(be, 2026, 3, 3, 14, 0) // a Tuesday
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"18:00", at(be, 2026, 3, 3, 18, 0)},
		{"09:00", at(be, 2026, 3, 4, 9, 0)},
		{"14:00", at(be, 2026, 3, 4, 14, 0)},
		{"24:00", at(be, 2026, 3, 4, 0, 0)},
		{"Fri 18:00", at(be, 2026, 3, 6, 18, 0)},
		{"tue 13:00", at(be, 2026, 3, 10, 13, 0)},
		{"tue 15:00", at(be, 2026, 3, 3, 15, 0)},
		{"3h", now.Add(3 * time.Hour)},
		{"2026-03-05T08:00:00+01:00", at(be, 2026, 3, 5, 8, 0)},
	} {
		got, err := p.ParseUntil(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ParseUntil(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "18", "25:00", "Fry 18:00", "-1h", "tomorrow"} {
		if got, err := p.ParseUntil(bad, now); err == nil {
			t.Errorf("ParseUntil(%q) = %v, want an error", bad, got)
		}
	}
}

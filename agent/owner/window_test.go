package owner

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, even on a machine without tzdata
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func sched(t testing.TB, tz string, specs ...string) *Schedule {
	t.Helper()
	s, err := ParseSchedule(specs, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// at is a wall-clock time in loc (only for times that exist once).
func at(loc *time.Location, y int, m time.Month, d, hh, mm int) time.Time {
	return time.Date(y, m, d, hh, mm, 0, 0, loc)
}

func TestParseWindow(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []string // String() of each window
		days string   // days of the first window, Sun first, as 0/1
		span [2]int   // Start, End of the first window
	}{
		{"Mon-Fri 19:00-08:00", []string{"Mon-Fri 19:00-08:00"}, "0111110", [2]int{19 * 60, 8 * 60}},
		{"Sat,Sun", []string{"Sat,Sun"}, "1000001", [2]int{0, 1440}},
		{"Mon 09:00-17:00", []string{"Mon 09:00-17:00"}, "0100000", [2]int{9 * 60, 17 * 60}},
		{"  sat , SUNDAY  ", []string{"Sat,Sun"}, "1000001", [2]int{0, 1440}},
		{"Fri-Mon", []string{"Mon,Fri-Sun"}, "1100011", [2]int{0, 1440}},
		{"Sun-Sat", []string{"Mon-Sun"}, "1111111", [2]int{0, 1440}},
		{"12:00-13:00", []string{"12:00-13:00"}, "1111111", [2]int{12 * 60, 13 * 60}},
		{"Mon,Wed 8:30-9:45, 22:00-24:00", []string{"Mon,Wed 08:30-09:45", "Mon,Wed 22:00-24:00"}, "0101000", [2]int{8*60 + 30, 9*60 + 45}},
		{"Tue 00:00-24:00", []string{"Tue"}, "0010000", [2]int{0, 1440}},
		{"Mon,Tue 23:00-00:00", []string{"Mon,Tue 23:00-00:00"}, "0110000", [2]int{23 * 60, 0}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			ws, err := ParseWindow(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range ws {
				got = append(got, w.String())
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("windows %q, want %q", got, tc.want)
			}
			var days strings.Builder
			for _, d := range ws[0].Days {
				days.WriteString(map[bool]string{true: "1", false: "0"}[d])
			}
			if days.String() != tc.days {
				t.Errorf("days %s, want %s", days.String(), tc.days)
			}
			if ws[0].Start != tc.span[0] || ws[0].End != tc.span[1] {
				t.Errorf("span %d-%d, want %d-%d", ws[0].Start, ws[0].End, tc.span[0], tc.span[1])
			}
			// What String writes parses to the same windows.
			for i, w := range ws {
				again, err := ParseWindow(w.String())
				if err != nil || len(again) != 1 || again[0] != w {
					t.Errorf("window %d: %q parses to %v, %v", i, w.String(), again, err)
				}
			}
		})
	}
}

func TestParseWindowErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"", "empty spec"},
		{"   ", "empty spec"},
		{"Mon-Fry 19:00-08:00", `unknown day "Fry"`},
		{"Mon,,Tue", "empty day"},
		{"Mon 25:00-08:00", `time "25:00"`},
		{"Mon 19:60-20:00", `time "19:60"`},
		{"Mon 19:00", "want HH:MM-HH:MM"},
		{"Mon 19:00-19:00", "is empty"},
		{"Mon 24:00-08:00", "24:00 can only end"},
		{"Mon 24:30-08:00", `time "24:30"`},
		{"Mon 7:0-8:00", `time "7:0"`},
		{"19:00-08:00 Mon", `time "08:00Mon"`},
		{"Mon 19:00-08:00,", "want HH:MM-HH:MM"},
		{"weekdays", `unknown day "weekdays"`},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := ParseWindow(tc.spec)
			if err == nil {
				t.Fatalf("ParseWindow(%q) accepted it", tc.spec)
			}
			if !errors.Is(err, ErrBadWindow) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want ErrBadWindow saying %q", err, tc.want)
			}
			if tc.spec != "" && strings.TrimSpace(tc.spec) != "" && !strings.Contains(err.Error(), tc.spec) {
				t.Errorf("error %q does not quote the spec %q", err, tc.spec)
			}
		})
	}
}

func TestParseScheduleZone(t *testing.T) {
	if _, err := ParseSchedule(nil, "Mars/Olympus_Mons"); err == nil || !strings.Contains(err.Error(), "Mars/Olympus_Mons") {
		t.Errorf("unknown zone: error %v, want one naming it", err)
	}
	for _, tz := range []string{"", "Local"} {
		s := sched(t, tz)
		if s.Location() != time.Local {
			t.Errorf("zone %q: location %v, want the machine's", tz, s.Location())
		}
	}
	if got := sched(t, "Europe/Berlin", "Mon-Fri 19:00-08:00", "Sat,Sun").String(); got != "Mon-Fri 19:00-08:00; Sat,Sun (Europe/Berlin)" {
		t.Errorf("String %q", got)
	}
}

// The example: weeknights from 19:00 to 08:00 and whole weekends,
// in the week of Monday 2026-03-02 (no daylight-saving change).
func TestScheduleWeeknightsAndWeekend(t *testing.T) {
	be := zone(t, "Europe/Berlin")
	s := sched(t, "Europe/Berlin", "Mon-Fri 19:00-08:00", "Sat,Sun")
	if wd := at(be, 2026, 3, 2, 0, 0).Weekday(); wd != time.Monday {
		t.Fatalf("2026-03-02 is a %v", wd)
	}
	for _, tc := range []struct {
		name       string
		t          time.Time
		lent       bool
		start, end time.Time // of the interval around t, or of the next one
	}{
		{"Monday evening before", at(be, 2026, 3, 2, 18, 59), false, at(be, 2026, 3, 2, 19, 0), at(be, 2026, 3, 3, 8, 0)},
		{"Monday 19:00 exactly", at(be, 2026, 3, 2, 19, 0), true, at(be, 2026, 3, 2, 19, 0), at(be, 2026, 3, 3, 8, 0)},
		{"across midnight", at(be, 2026, 3, 3, 0, 30), true, at(be, 2026, 3, 2, 19, 0), at(be, 2026, 3, 3, 8, 0)},
		{"Tuesday 08:00 exactly", at(be, 2026, 3, 3, 8, 0), false, at(be, 2026, 3, 3, 19, 0), at(be, 2026, 3, 4, 8, 0)},
		{"Friday night runs into the weekend", at(be, 2026, 3, 6, 20, 0), true, at(be, 2026, 3, 6, 19, 0), at(be, 2026, 3, 9, 0, 0)},
		{"Saturday noon", at(be, 2026, 3, 7, 12, 0), true, at(be, 2026, 3, 6, 19, 0), at(be, 2026, 3, 9, 0, 0)},
		// 'Mon-Fri 19:00-08:00' starts on Mon-Fri: Sunday night is not
		// in it, so the weekend ends at Monday 00:00.
		{"Monday small hours", at(be, 2026, 3, 9, 3, 0), false, at(be, 2026, 3, 9, 19, 0), at(be, 2026, 3, 10, 8, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv, lent := s.At(tc.t)
			if lent != tc.lent {
				t.Fatalf("lent %v, want %v", lent, tc.lent)
			}
			if !lent {
				if iv, ok := s.Next(tc.t); !ok || !iv.Start.Equal(tc.start) || !iv.End.Equal(tc.end) {
					t.Fatalf("next %v-%v (%v), want %v-%v", iv.Start, iv.End, ok, tc.start, tc.end)
				}
				return
			}
			if !iv.Start.Equal(tc.start) || !iv.End.Equal(tc.end) {
				t.Errorf("interval %v-%v, want %v-%v", iv.Start, iv.End, tc.start, tc.end)
			}
		})
	}
}

func TestScheduleUnionAndForever(t *testing.T) {
	utc := time.UTC
	mon := at(utc, 2026, 3, 2, 0, 0)
	s := sched(t, "UTC", "Mon 09:00-12:00", "Mon 11:00-13:00", "Mon 13:00-14:00", "Mon 15:00-16:00")
	if iv, ok := s.At(mon.Add(10 * time.Hour)); !ok || !iv.Start.Equal(mon.Add(9*time.Hour)) || !iv.End.Equal(mon.Add(14*time.Hour)) {
		t.Errorf("overlapping and touching windows: %v-%v (%v), want 09:00-14:00", iv.Start, iv.End, ok)
	}
	if _, ok := s.At(mon.Add(14*time.Hour + 30*time.Minute)); ok {
		t.Error("14:30 lent, want the gap between 14:00 and 15:00 kept")
	}
	if iv, ok := s.Next(mon.Add(14 * time.Hour)); !ok || !iv.Start.Equal(mon.Add(15*time.Hour)) {
		t.Errorf("next after 14:00: %v (%v), want 15:00", iv.Start, ok)
	}
	// Next from inside an interval is the one after it.
	if iv, ok := s.Next(mon.Add(10 * time.Hour)); !ok || !iv.Start.Equal(mon.Add(15*time.Hour)) {
		t.Errorf("next from 10:00: %v (%v), want 15:00", iv.Start, ok)
	}
	for _, specs := range [][]string{{"Mon-Sun"}, {"Mon-Fri", "Sat,Sun 00:00-24:00"}, {"00:00-12:00", "12:00-24:00"}} {
		s := sched(t, "Europe/Berlin", specs...)
		iv, ok := s.At(mon)
		if !ok || !iv.Start.IsZero() || !iv.End.IsZero() {
			t.Errorf("%q: %v-%v (%v), want lent with no start and no end", specs, iv.Start, iv.End, ok)
		}
		if _, ok := s.Next(mon); ok {
			t.Errorf("%q: a next interval, want none", specs)
		}
	}
	always := sched(t, "UTC")
	if iv, ok := always.At(mon); !ok || !iv.End.IsZero() || !always.Always() {
		t.Errorf("no windows: %v (%v), want lent forever", iv, ok)
	}
}

// Europe/Berlin springs forward on Sunday 2026-03-29 at 02:00 CET (01:00
// UTC) to 03:00 CEST: 02:30 does not exist that day.
func TestScheduleSpringForward(t *testing.T) {
	jump := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	if _, off := jump.Add(-time.Second).In(zone(t, "Europe/Berlin")).Zone(); off != 3600 {
		t.Fatalf("offset before the jump %d, want 3600", off)
	}
	for _, tc := range []struct {
		spec       string
		start, end time.Time
	}{
		// A start in the gap: the moment the clock jumps past it.
		{"Sun 02:30-04:00", jump, time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)},
		// An end in the gap: the same moment.
		{"Sat 22:00-02:30", time.Date(2026, 3, 28, 21, 0, 0, 0, time.UTC), jump},
		// A night across the change is an hour shorter: 19:00 CET to
		// 08:00 CEST is 12 hours.
		{"Sat 19:00-08:00", time.Date(2026, 3, 28, 18, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 6, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			s := sched(t, "Europe/Berlin", tc.spec)
			if _, ok := s.At(tc.start.Add(-time.Second)); ok {
				t.Errorf("lent a second before %v", tc.start)
			}
			iv, ok := s.At(tc.start)
			if !ok || !iv.Start.Equal(tc.start) || !iv.End.Equal(tc.end) {
				t.Errorf("interval %v-%v (%v), want %v-%v", iv.Start.UTC(), iv.End.UTC(), ok, tc.start, tc.end)
			}
		})
	}
	// A window wholly inside the skipped hour never happens that day.
	s := sched(t, "Europe/Berlin", "Sun 02:10-02:50")
	if iv, ok := s.Next(jump.Add(-2 * time.Hour)); !ok || !iv.Start.After(jump.Add(6*24*time.Hour)) {
		t.Errorf("next 02:10-02:50 after the jump: %v (%v), want the Sunday after", iv.Start, ok)
	}
}

// America/New_York falls back on Sunday 2026-11-01 at 02:00 EDT (06:00
// UTC) to 01:00 EST: 01:30 happens at 05:30 and at 06:30 UTC.
func TestScheduleFallBack(t *testing.T) {
	ny := zone(t, "America/New_York")
	first := time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)
	second := first.Add(time.Hour)
	if a, b := first.In(ny).Format("15:04 MST"), second.In(ny).Format("15:04 MST"); a != "01:30 EDT" || b != "01:30 EST" {
		t.Fatalf("01:30 twice: %s, %s", a, b)
	}
	for _, tc := range []struct {
		spec       string
		start, end time.Time
	}{
		// A time that happens twice means its first occurrence: the
		// window lasts 2.5 hours, and the repeated 01:30 does not start
		// it again.
		{"Sun 01:30-03:00", first, time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)},
		{"Sat 20:00-01:30", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), first},
		// A night across the change is an hour longer.
		{"Sat 19:00-08:00", time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 13, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			s := sched(t, "America/New_York", tc.spec)
			iv, ok := s.At(tc.start)
			if !ok || !iv.Start.Equal(tc.start) || !iv.End.Equal(tc.end) {
				t.Errorf("interval %v-%v (%v), want %v-%v", iv.Start.UTC(), iv.End.UTC(), ok, tc.start, tc.end)
			}
			if _, ok := s.At(tc.start.Add(-time.Second)); ok {
				t.Errorf("lent a second before %v", tc.start)
			}
			if _, ok := s.At(tc.end); ok {
				t.Errorf("lent at the end %v", tc.end)
			}
		})
	}
	// The second 01:30 lies inside "Sat 20:00-01:30"? No: that window
	// ended at the first one.
	s := sched(t, "America/New_York", "Sat 20:00-01:30")
	if _, ok := s.At(second.Add(-time.Minute)); ok {
		t.Error("lent at the second 01:29, after the window ended at the first 01:30")
	}
}

// wallNaive is t's wall clock in loc, as a UTC time with the same fields.
func wallNaive(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
}

// bruteBoundary scans minute by minute for the first instant whose wall
// clock reads the target or later: boundary's definition, unoptimised.
func bruteBoundary(y int, m time.Month, d, min int, loc *time.Location) time.Time {
	target := time.Date(y, m, d, 0, min, 0, 0, time.UTC)
	// No zone is more than 14 hours ahead of UTC.
	for u := target.Add(-15 * time.Hour); ; u = u.Add(time.Minute) {
		if !wallNaive(u, loc).Before(target) {
			return u
		}
	}
}

var dstZones = []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata", "UTC"}

// transitions returns the zone's offset changes in 2026 (and a plain day
// for zones with none).
func transitions(loc *time.Location) []time.Time {
	var out []time.Time
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for t.Year() == 2026 {
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || end.Year() != 2026 {
			break
		}
		out = append(out, end)
		t = end
	}
	if len(out) == 0 {
		out = append(out, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	}
	return out
}

func TestBoundaryMatchesBruteForce(t *testing.T) {
	for _, name := range dstZones {
		loc := zone(t, name)
		for _, tr := range transitions(loc) {
			y, m, d := tr.In(loc).Date()
			for dd := -1; dd <= 1; dd++ {
				for min := 0; min <= minutesPerDay; min += 10 {
					got := boundary(y, m, d+dd, min, loc)
					want := bruteBoundary(y, m, d+dd, min, loc)
					if !got.Equal(want) {
						t.Fatalf("%s %04d-%02d-%02d %s: boundary %v, brute force %v", name, y, m, d+dd, clockString(min), got.UTC(), want.UTC())
					}
				}
			}
		}
	}
}

// bruteIntervals lists every window occurrence on the local dates around
// t, with brute-force boundaries, unmerged.
func bruteIntervals(s *Schedule, t time.Time, days int) []Interval {
	var out []Interval
	y, m, d := t.In(s.loc).Date()
	for dd := -days; dd <= days; dd++ {
		wd := time.Date(y, m, d+dd, 12, 0, 0, 0, time.UTC).Weekday()
		for _, w := range s.windows {
			if !w.Days[wd] {
				continue
			}
			end := w.End
			if end <= w.Start {
				end += minutesPerDay
			}
			out = append(out, Interval{bruteBoundary(y, m, d+dd, w.Start, s.loc), bruteBoundary(y, m, d+dd, end, s.loc)})
		}
	}
	return out
}

func covered(ivs []Interval, t time.Time) (time.Time, bool) {
	var end time.Time
	ok := false
	for _, iv := range ivs {
		if !t.Before(iv.Start) && t.Before(iv.End) && iv.End.After(end) {
			end, ok = iv.End, true
		}
	}
	return end, ok
}

// TestScheduleMatchesBruteForce checks At against the definition: t is
// lent when some window occurrence holds it, and the lent time ends at
// the first instant no occurrence holds. Random schedules, their times
// often in the small hours where the changes happen, are checked every
// 10 minutes across a day on each side of a daylight-saving change.
func TestScheduleMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	clock := func() int {
		if rng.IntN(2) == 0 {
			return rng.IntN(16) * 15 // 00:00-03:45
		}
		return rng.IntN(96) * 15
	}
	const days = 4
	for i := range 60 {
		name := dstZones[i%len(dstZones)]
		loc := zone(t, name)
		var specs []string
		for range 1 + rng.IntN(3) {
			var ds []string
			for d := range 7 {
				if rng.IntN(3) == 0 {
					ds = append(ds, dayNames[d])
				}
			}
			if len(ds) == 0 {
				ds = append(ds, dayNames[rng.IntN(7)])
			}
			a, b := clock(), clock()
			if a == b {
				b = (a + 60) % minutesPerDay
			}
			specs = append(specs, strings.Join(ds, ",")+" "+clockString(a)+"-"+clockString(b))
		}
		s := sched(t, name, specs...)
		trs := transitions(loc)
		tr := trs[rng.IntN(len(trs))]
		brute := bruteIntervals(s, tr, days)
		for tt := tr.Add(-24 * time.Hour); tt.Before(tr.Add(24 * time.Hour)); tt = tt.Add(10 * time.Minute) {
			iv, lent := s.At(tt)
			end, want := covered(brute, tt)
			if lent != want {
				t.Fatalf("%q in %s at %v: lent %v, brute force %v", specs, name, tt.In(loc), lent, want)
			}
			if !lent {
				continue
			}
			for {
				next, ok := covered(brute, end)
				if !ok {
					break
				}
				end = next
			}
			if end.Before(tr.AddDate(0, 0, days-2)) && !iv.End.Equal(end) {
				t.Fatalf("%q in %s at %v: end %v, brute force %v", specs, name, tt.In(loc), iv.End.In(loc), end.In(loc))
			}
		}
	}
}

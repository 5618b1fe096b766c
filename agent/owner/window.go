package owner

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrBadWindow is wrapped by every error ParseWindow returns.
var ErrBadWindow = errors.New("bad lending window")

// minutesPerDay is a day on the wall clock; 24:00 is the end of a day.
const minutesPerDay = 24 * 60

// horizon is how far from an instant Schedule looks for the lent interval
// around it. A weekly pattern that leaves any gap leaves one at least
// twice in 15 days even when a daylight-saving change closes one of them,
// so a merged interval reaching the horizon never ends.
const horizon = 15

var dayNames = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// Window is one lending window: on each of its days, from Start to End on
// the wall clock. An End not after Start crosses midnight: the window
// starts on the listed day and ends on the next one.
type Window struct {
	// Days is indexed by time.Weekday.
	Days [7]bool
	// Start and End are minutes after midnight; End may be 1440 (24:00).
	Start, End int
}

// ParseWindow parses one window spec:
//
//	DAYS              whole days: "Sat,Sun", "Mon-Fri", "Fri-Mon"
//	DAYS TIMES        "Mon-Fri 19:00-08:00", "Mon 09:00-17:00"
//	TIMES             every day: "12:00-13:00"
//
// DAYS is a comma-separated list of days (Mon, Tue, ... or the full names,
// any case) and day ranges, which may wrap (Fri-Mon). TIMES is one or more
// comma-separated HH:MM-HH:MM ranges; 24:00 ends a day. A spec with several
// time ranges is several windows.
func ParseWindow(spec string) ([]Window, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("%w: empty spec (want e.g. 'Mon-Fri 19:00-08:00' or 'Sat,Sun')", ErrBadWindow)
	}
	cut := strings.IndexAny(s, "0123456789")
	if cut < 0 {
		cut = len(s)
	}
	dayPart := strings.Join(strings.Fields(s[:cut]), "")
	timePart := strings.Join(strings.Fields(s[cut:]), "")
	days := [7]bool{true, true, true, true, true, true, true}
	if dayPart != "" {
		d, err := parseDays(dayPart)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrBadWindow, spec, err)
		}
		days = d
	}
	if timePart == "" {
		return []Window{{Days: days, Start: 0, End: minutesPerDay}}, nil
	}
	var out []Window
	for r := range strings.SplitSeq(timePart, ",") {
		start, end, err := parseRange(r)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrBadWindow, spec, err)
		}
		out = append(out, Window{Days: days, Start: start, End: end})
	}
	return out, nil
}

func parseDays(s string) ([7]bool, error) {
	var days [7]bool
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return days, errors.New("empty day in the list")
		}
		from, to, isRange := strings.Cut(item, "-")
		a, err := parseDay(from)
		if err != nil {
			return days, err
		}
		if !isRange {
			days[a] = true
			continue
		}
		b, err := parseDay(to)
		if err != nil {
			return days, err
		}
		for d := a; ; d = (d + 1) % 7 {
			days[d] = true
			if d == b {
				break
			}
		}
	}
	return days, nil
}

func parseDay(s string) (time.Weekday, error) {
	for i, n := range dayNames {
		full := time.Weekday(i).String()
		if strings.EqualFold(s, n) || strings.EqualFold(s, full) {
			return time.Weekday(i), nil
		}
	}
	return 0, fmt.Errorf("unknown day %q (want Mon, Tue, Wed, Thu, Fri, Sat, Sun or a range like Mon-Fri)", s)
}

func parseRange(r string) (start, end int, err error) {
	a, b, ok := strings.Cut(r, "-")
	if !ok {
		return 0, 0, fmt.Errorf("time range %q: want HH:MM-HH:MM", r)
	}
	if start, err = parseClock(a); err != nil {
		return 0, 0, fmt.Errorf("time range %q: %w", r, err)
	}
	if start == minutesPerDay {
		return 0, 0, fmt.Errorf("time range %q: 24:00 can only end a range", r)
	}
	if end, err = parseClock(b); err != nil {
		return 0, 0, fmt.Errorf("time range %q: %w", r, err)
	}
	if start == end {
		return 0, 0, fmt.Errorf("time range %q is empty (a whole day is written without times, e.g. 'Sat')", r)
	}
	return start, end, nil
}

// parseClock reads H:MM or HH:MM (00:00 to 24:00) as minutes after midnight.
func parseClock(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(m) != 2 || len(h) < 1 || len(h) > 2 {
		return 0, fmt.Errorf("time %q: want HH:MM", s)
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("time %q: want HH:MM between 00:00 and 24:00", s)
	}
	return hh*60 + mm, nil
}

// String writes the window back in the spec syntax ("Mon-Fri 19:00-08:00").
func (w Window) String() string {
	days := daysString(w.Days)
	if w.Start == 0 && w.End == minutesPerDay {
		if days == "" {
			return "Mon-Sun"
		}
		return days
	}
	times := clockString(w.Start) + "-" + clockString(w.End)
	if days == "" {
		return times
	}
	return days + " " + times
}

// daysString names the days, Monday first, with runs of three or more as
// ranges; every day is "".
func daysString(d [7]bool) string {
	order := [7]time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}
	all := true
	for _, v := range d {
		all = all && v
	}
	if all {
		return ""
	}
	var parts []string
	for i := 0; i < 7; {
		if !d[order[i]] {
			i++
			continue
		}
		j := i
		for j+1 < 7 && d[order[j+1]] {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, dayNames[order[i]]+"-"+dayNames[order[j]])
		default:
			for k := i; k <= j; k++ {
				parts = append(parts, dayNames[order[k]])
			}
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func clockString(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }

// Interval is a span of lent time, [Start, End). A zero Start means it began
// before anything the schedule looks at; a zero End means it never ends.
type Interval struct {
	Start, End time.Time
}

// Schedule is the union of an owner's lending windows in one time zone. A
// schedule without windows lends at all times.
//
// Window boundaries are wall-clock times on local dates. A boundary time
// that happens twice (the hour a daylight-saving change repeats) means its
// first occurrence; one that does not exist (the hour skipped) means the
// moment the clock jumps past it. Formally a boundary at date D, time T is
// the first instant whose wall clock reads D T or later.
type Schedule struct {
	windows []Window
	loc     *time.Location
}

// ParseSchedule parses window specs (see ParseWindow) in the time zone tz,
// an IANA name ("Europe/Berlin"); "" or "Local" is the machine's zone.
func ParseSchedule(specs []string, tz string) (*Schedule, error) {
	loc, err := LoadZone(tz)
	if err != nil {
		return nil, err
	}
	s := &Schedule{loc: loc}
	for _, spec := range specs {
		ws, err := ParseWindow(spec)
		if err != nil {
			return nil, err
		}
		s.windows = append(s.windows, ws...)
	}
	return s, nil
}

// LoadZone loads an IANA time zone; "" and "Local" are the machine's.
func LoadZone(tz string) (*time.Location, error) {
	if tz == "" || tz == "Local" {
		return time.Local, nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: not a known IANA zone name (like Europe/Berlin): %w", tz, err)
	}
	return loc, nil
}

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// Windows are the parsed windows, in the order given.
func (s *Schedule) Windows() []Window { return slices.Clone(s.windows) }

// Always reports whether the schedule has no windows (lends at all times).
func (s *Schedule) Always() bool { return len(s.windows) == 0 }

// String lists the windows and the zone: "Mon-Fri 19:00-08:00; Sat,Sun
// (Europe/Berlin)", or "always (Europe/Berlin)".
func (s *Schedule) String() string {
	if s.Always() {
		return "always (" + s.loc.String() + ")"
	}
	parts := make([]string, len(s.windows))
	for i, w := range s.windows {
		parts[i] = w.String()
	}
	return strings.Join(parts, "; ") + " (" + s.loc.String() + ")"
}

// At returns the lent interval that holds t (the windows merged where they
// touch or overlap), and whether t is lent at all.
func (s *Schedule) At(t time.Time) (Interval, bool) {
	if s.Always() {
		return Interval{}, true
	}
	from, to := t.AddDate(0, 0, -horizon), t.AddDate(0, 0, horizon)
	for _, iv := range s.merged(from, to) {
		if !t.Before(iv.Start) && t.Before(iv.End) {
			return unbound(iv, from, to), true
		}
	}
	return Interval{}, false
}

// Next returns the first lent interval that starts after t.
func (s *Schedule) Next(t time.Time) (Interval, bool) {
	if s.Always() {
		return Interval{}, false
	}
	from, to := t.AddDate(0, 0, -horizon), t.AddDate(0, 0, 2*horizon)
	for _, iv := range s.merged(from, to) {
		if iv.Start.After(t) {
			return unbound(iv, from, to), true
		}
	}
	return Interval{}, false
}

// unbound marks the sides of iv that reach the horizon as unbounded.
func unbound(iv Interval, from, to time.Time) Interval {
	if !iv.Start.After(from) {
		iv.Start = time.Time{}
	}
	if !iv.End.Before(to) {
		iv.End = time.Time{}
	}
	return iv
}

// merged returns the schedule's intervals that meet [from, to), clipped to
// it, sorted and merged where they touch or overlap.
func (s *Schedule) merged(from, to time.Time) []Interval {
	var ivs []Interval
	y, m, d := from.In(s.loc).Date()
	day := time.Date(y, m, d-1, 12, 0, 0, 0, time.UTC)
	for ; ; day = day.AddDate(0, 0, 1) {
		if boundary(day.Year(), day.Month(), day.Day(), 0, s.loc).After(to) {
			break
		}
		for _, w := range s.windows {
			if !w.Days[day.Weekday()] {
				continue
			}
			end := w.End
			if end <= w.Start {
				end += minutesPerDay
			}
			iv := Interval{
				Start: boundary(day.Year(), day.Month(), day.Day(), w.Start, s.loc),
				End:   boundary(day.Year(), day.Month(), day.Day(), end, s.loc),
			}
			if iv.Start.Before(from) {
				iv.Start = from
			}
			if iv.End.After(to) {
				iv.End = to
			}
			if iv.Start.Before(iv.End) {
				ivs = append(ivs, iv)
			}
		}
	}
	slices.SortFunc(ivs, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	var out []Interval
	for _, iv := range ivs {
		if n := len(out); n > 0 && !iv.Start.After(out[n-1].End) {
			if iv.End.After(out[n-1].End) {
				out[n-1].End = iv.End
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// boundary returns the first instant at which the wall clock in loc reads
// the date y-m-d at min minutes after midnight, or later (min may pass
// 1440: the following days).
//
// Within one zone period [start, end) of offset o the wall clock is u+o,
// so the first instant there reading at least the target w is
// max(start, w−o), if that is before end; the answer is the first such
// instant over the periods in time order.
func boundary(y int, m time.Month, d, min int, loc *time.Location) time.Time {
	w := time.Date(y, m, d, 0, min, 0, 0, time.UTC).Unix()
	// Offsets lie within ±26 h, so the answer is after w−30 h.
	u := w - 30*3600
	for {
		t := time.Unix(u, 0).In(loc)
		_, off := t.Zone()
		start, end := t.ZoneBounds()
		cand := w - int64(off)
		if !start.IsZero() {
			cand = max(cand, start.Unix())
		}
		if end.IsZero() || cand < end.Unix() {
			return time.Unix(cand, 0).In(loc)
		}
		if end.Unix() <= u {
			// A zone database that does not advance; cannot happen with
			// tzdata, guarded so the loop ends.
			return time.Unix(cand, 0).In(loc)
		}
		u = end.Unix()
	}
}

// nextClock returns the first instant after now at which the wall clock in
// loc reads hh:mm (today's if still ahead, else tomorrow's).
func nextClock(now time.Time, minute int, loc *time.Location) time.Time {
	y, m, d := now.In(loc).Date()
	for i := 0; ; i++ {
		t := boundary(y, m, d+i, minute, loc)
		if t.After(now) {
			return t
		}
	}
}

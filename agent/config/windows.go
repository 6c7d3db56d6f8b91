package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MaxWindowLength bounds a window's length: a week covers every repeating
// pattern, and longer would just mean "always".
const MaxWindowLength = 7 * 24 * time.Hour

// Window is a parsed maintenance window: it opens at a local wall-clock
// time on the listed weekdays and stays open for an elapsed length, which
// may cross midnight (and a DST change). Contains and Next are pure, so the
// engine's decisions can be table-tested with any instant.
type Window struct {
	days         [7]bool // indexed by time.Weekday, the day the window opens
	hour, minute int
	length       time.Duration
	loc          *time.Location
}

// ParseWindow checks a WindowSpec and binds it to a time zone.
func ParseWindow(spec WindowSpec, loc *time.Location) (Window, error) {
	w := Window{loc: loc, length: spec.Len()}
	var err error
	if w.days, err = parseDays(spec.Days); err != nil {
		return Window{}, fmt.Errorf("days: %w", err)
	}
	if w.hour, w.minute, err = parseClock(spec.StartClock()); err != nil {
		return Window{}, fmt.Errorf("start: %w", err)
	}
	if err := checkWindowLength(w.length); err != nil {
		return Window{}, fmt.Errorf("length: %w", err)
	}
	if loc == nil {
		return Window{}, fmt.Errorf("no time zone")
	}
	return w, nil
}

// Location is the configured time zone; zincati's "localtime" is "Local".
func (r *Reboot) Location() (*time.Location, error) {
	if r.TimeZone == "localtime" {
		return time.Local, nil
	}
	return time.LoadLocation(r.TimeZone)
}

// ParseWindows parses the reboot windows in the configured time zone.
func (r *Reboot) ParseWindows() (Windows, error) {
	loc, err := r.Location()
	if err != nil {
		return nil, fmt.Errorf("time_zone: %w", err)
	}
	ws := make(Windows, 0, len(r.Windows))
	for i, spec := range r.Windows {
		w, err := ParseWindow(spec, loc)
		if err != nil {
			return nil, fmt.Errorf("windows[%d].%w", i, err)
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// openingOn returns when the window opens on the local date y-m-d (d may
// be out of range; time.Date normalizes it) and whether it opens that day.
func (w Window) openingOn(y int, m time.Month, d int) (time.Time, bool) {
	noon := time.Date(y, m, d, 12, 0, 0, 0, w.loc)
	s := time.Date(y, m, d, w.hour, w.minute, 0, 0, w.loc)
	// A start inside a DST gap (02:30 on a spring-forward day) does not
	// exist; time.Date picks an instant an hour off either way. Open the
	// window when the gap ends instead, so it never opens before the wall
	// clock reaches its start.
	if s.Hour() != w.hour || s.Minute() != w.minute {
		// Compare wall clocks as if they were UTC.
		sy, sm, sd := s.Date()
		ny, nm, nd := noon.Date()
		got := time.Date(sy, sm, sd, s.Hour(), s.Minute(), 0, 0, time.UTC)
		want := time.Date(ny, nm, nd, w.hour, w.minute, 0, 0, time.UTC)
		start, end := s.ZoneBounds()
		if got.Before(want) {
			s = end // s is just before the jump
		} else {
			s = start // s is just after it
		}
	}
	return s, w.days[noon.Weekday()]
}

// Contains reports whether t is inside the window.
func (w Window) Contains(t time.Time) bool {
	lt := t.In(w.loc)
	y, m, d := lt.Date()
	// A window that opened up to length+1 days ago may still be open.
	back := int(w.length/(24*time.Hour)) + 1
	for k := 0; k <= back; k++ {
		s, ok := w.openingOn(y, m, d-k)
		if ok && !t.Before(s) && t.Before(s.Add(w.length)) {
			return true
		}
	}
	return false
}

// Next returns t if the window is open at t, else the next time it opens.
// It returns the zero time for a window with no days.
func (w Window) Next(t time.Time) time.Time {
	if w.Contains(t) {
		return t
	}
	lt := t.In(w.loc)
	y, m, d := lt.Date()
	for k := 0; k <= 7; k++ {
		if s, ok := w.openingOn(y, m, d+k); ok && s.After(t) {
			return s
		}
	}
	return time.Time{}
}

// Windows is a set of windows: open when any is.
type Windows []Window

// Contains reports whether any window contains t.
func (ws Windows) Contains(t time.Time) bool {
	for _, w := range ws {
		if w.Contains(t) {
			return true
		}
	}
	return false
}

// Next returns the earliest Next of all windows (zero if there is none).
func (ws Windows) Next(t time.Time) time.Time {
	var best time.Time
	for _, w := range ws {
		if n := w.Next(t); !n.IsZero() && (best.IsZero() || n.Before(best)) {
			best = n
		}
	}
	return best
}

var dayNames = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
	"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday, "wednesday": time.Wednesday,
	"thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday,
}

func parseDays(days []string) ([7]bool, error) {
	var set [7]bool
	if len(days) == 0 {
		return set, fmt.Errorf("must list at least one day")
	}
	for _, d := range days {
		wd, ok := dayNames[strings.ToLower(d)]
		if !ok {
			return set, fmt.Errorf("unknown day %q (want Mon, Tue, Wed, Thu, Fri, Sat or Sun)", d)
		}
		if set[wd] {
			return set, fmt.Errorf("day %q listed twice", d)
		}
		set[wd] = true
	}
	return set, nil
}

var clockRe = regexp.MustCompile(`^([01]?[0-9]|2[0-3]):([0-5][0-9])$`)

func parseClock(s string) (hour, minute int, err error) {
	m := clockRe.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("must be a time \"HH:MM\" (00:00-23:59), got %q", s)
	}
	hour, _ = strconv.Atoi(m[1])
	minute, _ = strconv.Atoi(m[2])
	return hour, minute, nil
}

func checkWindowLength(d time.Duration) error {
	if d <= 0 || d > MaxWindowLength {
		return fmt.Errorf("must be > 0 and <= 168h, got %q", Duration(d).String())
	}
	return nil
}

package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustWindow(t *testing.T, tz string, days []string, start string, length time.Duration) Window {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ParseWindow(WindowSpec{Days: days, Start: start, Length: Duration(length)}, loc)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// at parses "2026-03-09 22:00" in tz.
func at(t *testing.T, tz, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func utc(t *testing.T, s string) time.Time { return at(t, "UTC", s) }

func TestWindowContainsAndNext(t *testing.T) {
	// 2026-03-09 is a Monday.
	monNight := mustWindow(t, "UTC", []string{"Mon"}, "22:00", 4*time.Hour)
	sunNight := mustWindow(t, "UTC", []string{"sun"}, "22:00", 4*time.Hour)
	weekend := mustWindow(t, "UTC", []string{"Saturday"}, "00:00", 48*time.Hour)
	// US DST 2026: starts Sun Mar 8 02:00 EST -> 03:00 EDT (07:00 UTC),
	// ends Sun Nov 1 02:00 EDT -> 01:00 EST (06:00 UTC).
	nyEarly := mustWindow(t, "America/New_York", []string{"Sun"}, "01:00", 2*time.Hour)
	nyGap := mustWindow(t, "America/New_York", []string{"Sun"}, "02:30", time.Hour)
	nyAmbig := mustWindow(t, "America/New_York", []string{"Sun"}, "01:30", time.Hour)
	nyFall := mustWindow(t, "America/New_York", []string{"Sun"}, "00:30", 2*time.Hour)
	santiago := mustWindow(t, "America/Santiago", []string{"Sun"}, "00:30", time.Hour)
	// Europe DST 2026: Sun Mar 29 02:00 CET -> 03:00 CEST (01:00 UTC).
	berlin := mustWindow(t, "Europe/Berlin", []string{"Sat"}, "23:00", 3*time.Hour)

	tests := []struct {
		name     string
		w        Window
		t        time.Time
		contains bool
		next     time.Time
	}{
		{"before opening", monNight, utc(t, "2026-03-09 21:59"), false, utc(t, "2026-03-09 22:00")},
		{"at opening", monNight, utc(t, "2026-03-09 22:00"), true, utc(t, "2026-03-09 22:00")},
		{"after midnight, still open", monNight, utc(t, "2026-03-10 01:59"), true, utc(t, "2026-03-10 01:59")},
		{"closes at start+length", monNight, utc(t, "2026-03-10 02:00"), false, utc(t, "2026-03-16 22:00")},
		{"other day", monNight, utc(t, "2026-03-11 23:00"), false, utc(t, "2026-03-16 22:00")},
		{"crossing into next week", sunNight, utc(t, "2026-03-09 01:30"), true, utc(t, "2026-03-09 01:30")},
		{"sunday window from monday noon", sunNight, utc(t, "2026-03-09 12:00"), false, utc(t, "2026-03-15 22:00")},
		{"48h window, second day", weekend, utc(t, "2026-03-15 23:59"), true, utc(t, "2026-03-15 23:59")},
		{"48h window closed monday", weekend, utc(t, "2026-03-16 00:00"), false, utc(t, "2026-03-21 00:00")},
		{"other time zone converts", monNight, at(t, "Asia/Tokyo", "2026-03-10 07:30"), true, at(t, "Asia/Tokyo", "2026-03-10 07:30")},
		// Length is elapsed time: 01:00 EST + 2h ends at 04:00 EDT.
		{"spring forward, inside", nyEarly, utc(t, "2026-03-08 07:59"), true, utc(t, "2026-03-08 07:59")},
		{"spring forward, elapsed end", nyEarly, utc(t, "2026-03-08 08:00"), false, utc(t, "2026-03-15 05:00")},
		// 02:30 does not exist that day: the window opens when the gap
		// ends (03:00 EDT, 07:00 UTC), never at 01:30 EST.
		{"start in the gap, not an hour early", nyGap, utc(t, "2026-03-08 06:30"), false, utc(t, "2026-03-08 07:00")},
		{"start in the gap, opens when it ends", nyGap, utc(t, "2026-03-08 07:00"), true, utc(t, "2026-03-08 07:00")},
		{"start in the gap, elapsed length", nyGap, utc(t, "2026-03-08 08:00"), false, utc(t, "2026-03-15 06:30")},
		// 01:30 happens twice; the window opens at the first one.
		{"ambiguous start, first 01:30", nyAmbig, utc(t, "2026-11-01 05:30"), true, utc(t, "2026-11-01 05:30")},
		{"ambiguous start, second 01:30 is past the hour", nyAmbig, utc(t, "2026-11-01 06:30"), false, utc(t, "2026-11-08 06:30")},
		// 00:30 EDT + 2h elapsed = 01:30 EST (the second 01:30).
		{"fall back, first 01:45", nyFall, utc(t, "2026-11-01 05:45"), true, utc(t, "2026-11-01 05:45")},
		{"fall back, second 01:15 still open", nyFall, utc(t, "2026-11-01 06:15"), true, utc(t, "2026-11-01 06:15")},
		{"fall back, closes at 01:30 EST", nyFall, utc(t, "2026-11-01 06:30"), false, utc(t, "2026-11-08 05:30")},
		// Santiago jumps from Sat 24:00 to Sun 01:00 (04:00 UTC); time.Date
		// puts Sun 00:30 on Saturday evening, the window must not follow.
		{"gap at midnight, saturday evening closed", santiago, utc(t, "2026-09-06 03:30"), false, utc(t, "2026-09-06 04:00")},
		{"gap at midnight, opens at 01:00", santiago, utc(t, "2026-09-06 04:30"), true, utc(t, "2026-09-06 04:30")},
		{"gap at midnight, elapsed end", santiago, utc(t, "2026-09-06 05:00"), false, utc(t, "2026-09-13 03:30")},
		// Sat 23:00 CET (22:00 UTC) + 3h = 01:00 UTC = 03:00 CEST.
		{"berlin across DST, open at 02:59 CEST", berlin, utc(t, "2026-03-29 00:59"), true, utc(t, "2026-03-29 00:59")},
		{"berlin across DST, closed at 03:00 CEST", berlin, utc(t, "2026-03-29 01:00"), false, utc(t, "2026-04-04 21:00")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.Contains(tt.t); got != tt.contains {
				t.Errorf("Contains(%s) = %v, want %v", tt.t.UTC(), got, tt.contains)
			}
			if got := tt.w.Next(tt.t); !got.Equal(tt.next) {
				t.Errorf("Next(%s) = %s, want %s", tt.t.UTC(), got.UTC(), tt.next.UTC())
			}
		})
	}
}

func TestWindowsSet(t *testing.T) {
	ws := Windows{
		mustWindow(t, "UTC", []string{"Tue"}, "03:00", time.Hour),
		mustWindow(t, "UTC", []string{"Mon", "Wed"}, "22:00", time.Hour),
	}
	if !ws.Contains(utc(t, "2026-03-10 03:30")) || ws.Contains(utc(t, "2026-03-10 04:30")) {
		t.Error("Contains wrong")
	}
	if got, want := ws.Next(utc(t, "2026-03-10 04:30")), utc(t, "2026-03-11 22:00"); !got.Equal(want) {
		t.Errorf("Next = %s, want %s", got, want)
	}
	if got, want := ws.Next(utc(t, "2026-03-09 12:00")), utc(t, "2026-03-09 22:00"); !got.Equal(want) {
		t.Errorf("Next = %s, want %s", got, want)
	}
	if got := (Windows{}).Next(utc(t, "2026-03-09 12:00")); !got.IsZero() {
		t.Errorf("empty set Next = %s", got)
	}
}

func TestParseWindowErrors(t *testing.T) {
	for _, tt := range []struct {
		spec WindowSpec
		want string
	}{
		{WindowSpec{Days: nil, Start: "10:00", Length: Duration(time.Hour)}, "days: must list at least one day"},
		{WindowSpec{Days: []string{"Mo"}, Start: "10:00", Length: Duration(time.Hour)}, `days: unknown day "Mo"`},
		{WindowSpec{Days: []string{"Mon", "monday"}, Start: "10:00", Length: Duration(time.Hour)}, `days: day "monday" listed twice`},
		{WindowSpec{Days: []string{"Mon"}, Start: "24:00", Length: Duration(time.Hour)}, `start: must be a time "HH:MM"`},
		{WindowSpec{Days: []string{"Mon"}, Start: "10:5", Length: Duration(time.Hour)}, `start: must be a time "HH:MM"`},
		{WindowSpec{Days: []string{"Mon"}, Start: "10:00", Length: 0}, `length: must be > 0 and <= 168h, got "0s"`},
		{WindowSpec{Days: []string{"Mon"}, Start: "10:00", Length: Duration(169 * time.Hour)}, `length: must be > 0`},
	} {
		_, err := ParseWindow(tt.spec, time.UTC)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseWindow(%+v) = %v, want %q", tt.spec, err, tt.want)
		}
	}
	r := Reboot{TimeZone: "Mars/Olympus"}
	if _, err := r.ParseWindows(); err == nil || !strings.Contains(err.Error(), "time_zone") {
		t.Errorf("ParseWindows with a bad zone: %v", err)
	}
	r = Reboot{TimeZone: "Europe/Berlin", Windows: []WindowSpec{{Days: []string{"Sat"}, Start: "22:00", Length: Duration(time.Hour)}}}
	ws, err := r.ParseWindows()
	if err != nil || len(ws) != 1 || !ws.Contains(utc(t, "2026-03-14 21:30")) {
		t.Errorf("ParseWindows = %v, %v", ws, err)
	}
}

// A window in zincati's spelling (start_time, length_minutes, time zone
// "localtime") is the same window as in ours.
func TestZincatiSpellingIsTheSameWindow(t *testing.T) {
	ours := Reboot{TimeZone: "Local", Windows: []WindowSpec{{Days: []string{"Sat"}, Start: "23:30", Length: Duration(time.Hour)}}}
	theirs := Reboot{TimeZone: "localtime", Windows: []WindowSpec{{Days: []string{"Sat"}, StartTime: "23:30", LengthMinutes: 60}}}
	a, err := ours.ParseWindows()
	if err != nil {
		t.Fatal(err)
	}
	b, err := theirs.ParseWindows()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("zincati's spelling parsed to %+v, ours to %+v", b, a)
	}
}

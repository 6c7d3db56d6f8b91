package guard

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DiskStat holds the counters of /sys/block/<dev>/stat that the guard uses
// (Documentation/block/stat.rst).
type DiskStat struct {
	IOs      uint64 // completed reads + writes + flushes
	TicksMS  uint64 // time those requests spent, summed per request (ms)
	InFlight uint64
	BusyMS   uint64 // io_ticks: time the device had requests in flight
	Written  uint64 // bytes written (sectors written x 512)
	// QueueMS is time_in_queue: the time requests spent in flight, summed
	// (ms); its rate is the mean queue depth.
	QueueMS uint64
}

// ParseDiskStat parses a /sys/block/<dev>/stat line (11, 15 or 17 fields).
// It is read every tick: fields are walked in place, not split.
func ParseDiskStat(s string) (DiskStat, error) {
	var v [17]uint64
	n := 0
	for f, rest := nextField(s); f != ""; f, rest = nextField(rest) {
		x, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return DiskStat{}, fmt.Errorf("disk stat field %d %q: %w", n+1, f, err)
		}
		if n < len(v) {
			v[n] = x
		}
		n++
	}
	if n < 11 {
		return DiskStat{}, fmt.Errorf("disk stat %q: want at least 11 fields", s)
	}
	d := DiskStat{IOs: v[0] + v[4], TicksMS: v[3] + v[7], InFlight: v[8], BusyMS: v[9], Written: v[6] * 512, QueueMS: v[10]}
	if n >= 17 { // flushes: what fdatasync waits for
		d.IOs += v[15]
		d.TicksMS += v[16]
	}
	return d, nil
}

// nextField returns the first space-separated field of s ("" at the end)
// and what follows it: strings.Fields without the slice.
func nextField(s string) (field, rest string) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	j := i
	for j < len(s) && !isSpace(s[j]) {
		j++
	}
	return s[i:j], s[j:]
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// Await is the mean time a request completed between old and d took (what
// iostat calls await): the latency an fsync meets on this disk. ok is false
// when no request completed.
func (d DiskStat) Await(old DiskStat) (time.Duration, uint64, bool) {
	if d.IOs <= old.IOs || d.TicksMS < old.TicksMS {
		return 0, 0, false
	}
	n := d.IOs - old.IOs
	return time.Duration(d.TicksMS-old.TicksMS) * time.Millisecond / time.Duration(n), n, true
}

// Pressure is a PSI file (/proc/pressure/io or a cgroup's io.pressure).
type Pressure struct {
	SomeTotal time.Duration // time at least one task stalled on I/O
	FullTotal time.Duration // time all non-idle tasks stalled on I/O
}

// ParsePressure parses PSI "some avg10=... total=N" / "full ..." lines.
func ParsePressure(s string) (Pressure, error) {
	var p Pressure
	seen := false
	for rest := strings.TrimSpace(s); rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		kind, kvs := nextField(line)
		if kind == "" {
			continue
		}
		for kv, more := nextField(kvs); kv != ""; kv, more = nextField(more) {
			v, ok := strings.CutPrefix(kv, "total=")
			if !ok {
				continue
			}
			us, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return p, fmt.Errorf("pressure %q: %w", line, err)
			}
			switch kind {
			case "some":
				p.SomeTotal, seen = time.Duration(us)*time.Microsecond, true
			case "full":
				p.FullTotal = time.Duration(us) * time.Microsecond
			}
		}
	}
	if !seen {
		return p, fmt.Errorf("pressure %q: no \"some ... total=\" line", s)
	}
	return p, nil
}

// StallShare is the share of dt in which tasks stalled on I/O ("some"): 0-1.
func (p Pressure) StallShare(old Pressure, dt time.Duration) float64 {
	if dt <= 0 || p.SomeTotal < old.SomeTotal {
		return 0
	}
	s := float64(p.SomeTotal-old.SomeTotal) / float64(dt)
	if s > 1 {
		s = 1
	}
	return s
}

// ParseCPUStatUsage is a cgroup cpu.stat's usage_usec: the CPU time its
// tasks used.
func ParseCPUStatUsage(b []byte) (time.Duration, error) {
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); ok {
			us, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu.stat usage_usec %q: %w", v, err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("cpu.stat has no usage_usec line")
}

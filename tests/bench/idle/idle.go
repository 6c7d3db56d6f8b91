// Package idle measures what the agent costs a host while it has nothing to
// do: its resident memory and CPU, sampled from /proc, and what it did
// meanwhile (scrapes of etcd's metrics, rpm-ostree invocations). The
// benchmark itself (build tag bench) runs the real daemon; this file is the
// sampling and the report, unit-tested without it.
package idle

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports (the kernel converts to it for userspace).
const clockTicks = 100

// Sample is one reading of a process.
type Sample struct {
	At time.Time
	// RSS and HWM are VmRSS and VmHWM (peak RSS) in bytes.
	RSS, HWM uint64
	// CPU is the process's own user + system time; Children is that of
	// its waited-for children (the rpm-ostree CLI it runs).
	CPU, Children time.Duration
}

// ReadProc samples process pid from procRoot ("/proc").
func ReadProc(procRoot string, pid int) (Sample, error) {
	s := Sample{At: time.Now()}
	dir := fmt.Sprintf("%s/%d", procRoot, pid)
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return s, err
	}
	if s.RSS, s.HWM, err = ParseStatus(string(b)); err != nil {
		return s, fmt.Errorf("%s/status: %w", dir, err)
	}
	if b, err = os.ReadFile(dir + "/stat"); err != nil {
		return s, err
	}
	if s.CPU, s.Children, err = ParseStat(string(b)); err != nil {
		return s, fmt.Errorf("%s/stat: %w", dir, err)
	}
	return s, nil
}

// ParseStatus returns VmRSS and VmHWM of a /proc/PID/status, in bytes.
func ParseStatus(s string) (rss, hwm uint64, err error) {
	var haveRSS, haveHWM bool
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("%s: unexpected value %q", k, v)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", k, err)
		}
		if k == "VmRSS" {
			rss, haveRSS = n<<10, true
		} else {
			hwm, haveHWM = n<<10, true
		}
	}
	if !haveRSS || !haveHWM {
		return 0, 0, fmt.Errorf("no VmRSS or VmHWM (a kernel thread, or an exited process)")
	}
	return rss, hwm, nil
}

// ParseStat returns utime+stime and cutime+cstime of a /proc/PID/stat.
func ParseStat(s string) (self, children time.Duration, err error) {
	// comm (field 2) is in parentheses and may hold spaces or ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("no ')' after comm")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime..cstime are fields 14-17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("%d fields after comm, want at least 15", len(f))
	}
	var t [4]uint64
	for j := range t {
		if t[j], err = strconv.ParseUint(f[11+j], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("field %d: %w", 14+j, err)
		}
	}
	tick := time.Second / clockTicks
	return time.Duration(t[0]+t[1]) * tick, time.Duration(t[2]+t[3]) * tick, nil
}

// Counts are what the agent did while idle.
type Counts struct {
	// Scrapes are requests to etcd's metrics endpoint (counted by the
	// bench's proxy in front of it), ScrapeBytes what they returned.
	Scrapes, ScrapeBytes int64
	// RPMOstree counts rpm-ostree runs by subcommand (from the agent's
	// "starting operation" log lines).
	RPMOstree map[string]int
	// Warnings are the agent's WARN and ERROR lines.
	Warnings int
}

// CountLog counts, in the agent's text log, the rpm-ostree commands it ran
// (binary is the configured rpm-ostree path) and its warnings.
func CountLog(log, binary string) (runs map[string]int, warnings int) {
	runs = map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			warnings++
		}
		if !strings.Contains(line, `msg="starting operation"`) {
			continue
		}
		// slog's text handler writes argv as argv="[/path/rpm-ostree status --json]".
		_, argv, ok := strings.Cut(line, `argv="[`)
		if !ok {
			continue
		}
		argv, _, _ = strings.Cut(argv, `]"`)
		f := strings.Fields(argv)
		if len(f) == 0 || f[0] != binary {
			continue
		}
		sub := "(none)"
		if len(f) > 1 {
			sub = f[1]
		}
		runs[sub]++
	}
	return runs, warnings
}

// Summary is a run's figures.
type Summary struct {
	// Span is from the first sample (the agent ready) to the last.
	Span    time.Duration
	Samples int
	// RSSStart is the first sample's RSS; HWMEnd the last sample's peak.
	RSSStart, RSSMedian, RSSMax, HWMEnd uint64
	// CPUTotal is the agent's own CPU from its start (start-up included),
	// CPUIdle that spent within Span; ChildCPU that of its rpm-ostree runs.
	CPUTotal, CPUIdle, ChildCPU time.Duration
}

// CorePercent is CPUIdle as a percentage of one core over Span.
func (s Summary) CorePercent() float64 {
	if s.Span <= 0 {
		return 0
	}
	return 100 * s.CPUIdle.Seconds() / s.Span.Seconds()
}

// Summarize reduces samples in time order.
func Summarize(samples []Sample) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	first, last := samples[0], samples[len(samples)-1]
	s := Summary{Span: last.At.Sub(first.At), Samples: len(samples), RSSStart: first.RSS, HWMEnd: last.HWM,
		CPUTotal: last.CPU, CPUIdle: last.CPU - first.CPU, ChildCPU: last.Children}
	rss := make([]uint64, len(samples))
	for i, x := range samples {
		rss[i] = x.RSS
	}
	slices.Sort(rss)
	s.RSSMax = rss[len(rss)-1]
	if n := len(rss); n%2 == 1 {
		s.RSSMedian = rss[n/2]
	} else {
		s.RSSMedian = (rss[n/2-1] + rss[n/2]) / 2
	}
	return s
}

// mb is b in MB of 2^20 bytes (MiB), as ps and top count.
func mb(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) }

// WriteCSV writes one row per sample, times relative to the first.
func WriteCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"t_s", "rss_bytes", "hwm_bytes", "cpu_s", "children_cpu_s"})
	for _, s := range samples {
		_ = cw.Write([]string{
			strconv.FormatFloat(s.At.Sub(samples[0].At).Seconds(), 'f', 1, 64),
			strconv.FormatUint(s.RSS, 10), strconv.FormatUint(s.HWM, 10),
			strconv.FormatFloat(s.CPU.Seconds(), 'f', 2, 64),
			strconv.FormatFloat(s.Children.Seconds(), 'f', 2, 64),
		})
	}
	cw.Flush()
	return cw.Error()
}

// Goals of issue 15 (reported, not asserted: a loaded host is no reason
// to fail a run).
const (
	GoalRSS         = 25 << 20
	GoalCorePercent = 0.2
)

// Markdown is the run's table.
func Markdown(s Summary, c Counts, setup string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Agent idle cost\n\n%s\n\n", setup)
	fmt.Fprintf(&b, "Sampled every %s for %s (%d samples) from READY.\n\n",
		(s.Span / time.Duration(max(s.Samples-1, 1))).Round(time.Second), s.Span.Round(time.Second), s.Samples)
	b.WriteString("| measure | value | goal |\n|---|---|---|\n")
	goal := func(ok bool, g string) string {
		if ok {
			return g + " (met)"
		}
		return g + " (NOT met)"
	}
	fmt.Fprintf(&b, "| RSS at start | %s MB | |\n", mb(s.RSSStart))
	fmt.Fprintf(&b, "| RSS median | %s MB | %s |\n", mb(s.RSSMedian), goal(s.RSSMedian < GoalRSS, "< 25 MB"))
	fmt.Fprintf(&b, "| RSS max | %s MB | |\n", mb(s.RSSMax))
	fmt.Fprintf(&b, "| VmHWM (peak RSS) at end | %s MB | |\n", mb(s.HWMEnd))
	fmt.Fprintf(&b, "| CPU while idle | %.2f s | |\n", s.CPUIdle.Seconds())
	fmt.Fprintf(&b, "| CPU while idle, of one core | %.3f %% | %s |\n", s.CorePercent(), goal(s.CorePercent() <= GoalCorePercent, "<= 0.2 %"))
	fmt.Fprintf(&b, "| CPU since start (start-up included) | %.2f s | |\n", s.CPUTotal.Seconds())
	fmt.Fprintf(&b, "| CPU of its children (rpm-ostree CLI) | %.2f s | |\n", s.ChildCPU.Seconds())
	perMin := 0.0
	if s.Span > 0 {
		perMin = float64(c.Scrapes) / s.Span.Minutes()
	}
	fmt.Fprintf(&b, "| scrapes of etcd's /metrics | %d (%.2f a minute, %.0f KB each on the wire, uncompressed: the agent asks for identity) | |\n", c.Scrapes, perMin, avgKB(c))
	subs := make([]string, 0, len(c.RPMOstree))
	total := 0
	for k, n := range c.RPMOstree {
		subs = append(subs, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	slices.Sort(subs)
	fmt.Fprintf(&b, "| rpm-ostree runs | %d (%s) | |\n", total, strings.Join(subs, ", "))
	fmt.Fprintf(&b, "| warnings in the agent's log | %d | |\n\n", c.Warnings)
	return b.String()
}

func avgKB(c Counts) float64 {
	if c.Scrapes == 0 {
		return 0
	}
	return float64(c.ScrapeBytes) / float64(c.Scrapes) / 1024
}

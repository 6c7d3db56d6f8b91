// Package kstacks samples where chosen threads wait in the kernel and how
// deep a disk's queue is, for the latency benchmark (BENCH_PROFILE=1): which
// mechanism holds etcd's and the fio job's fsyncs (an XFS log force, an
// ext4 journal commit waiting for ordered data, the block queue) in every
// scenario. This file is the pure part: parsing the proc and sysfs files,
// folding stacks, the aggregate and its summary; sampler.go reads the
// files, cmd/kstacks runs it in the guest.
package kstacks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseStat reads a /proc/PID/task/TID/stat line: the state letter ('R',
// 'S', 'D', ...) and the thread's CPU time so far (utime + stime, in clock
// ticks). The comm before them is in parentheses and may itself hold
// spaces and parentheses, so the fields are found after the LAST ')'.
func ParseStat(stat []byte) (state byte, cpuTicks int64, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("stat %q: no ')' after the comm", stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	// state is field 3 of proc(5), utime and stime fields 14 and 15.
	if len(f) < 13 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("stat %q: no state and times after the comm", stat)
	}
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("stat %q: utime/stime %q", stat, v)
		}
		cpuTicks += n
	}
	return f[0][0], cpuTicks, nil
}

// FoldStack folds a /proc/PID/task/TID/stack ("[<0>] func+0x1b/0x70 [mod]"
// per line, innermost first) into one line "outer;...;leaf", leaf last as
// flame graphs want it, without addresses, offsets and module names, so
// that the same wait in two threads or samples is the same string.
// An empty stack (the thread ran while it was read) folds to "".
func FoldStack(stack []byte) string {
	var frames []string
	for line := range bytes.Lines(stack) {
		line = bytes.TrimSpace(line)
		if i := bytes.Index(line, []byte("] ")); bytes.HasPrefix(line, []byte("[<")) && i >= 0 {
			line = line[i+2:]
		}
		if i := bytes.IndexAny(line, "+ "); i >= 0 {
			line = line[:i]
		}
		if len(line) > 0 {
			frames = append(frames, string(line))
		}
	}
	slices.Reverse(frames)
	return strings.Join(frames, ";")
}

// ParseInflight reads /sys/block/DEV/inflight: the reads and writes the
// block layer has dispatched to the device and not seen complete (what
// waits in the I/O scheduler is not counted; what qemu's throttle holds is).
func ParseInflight(b []byte) (reads, writes int, err error) {
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("inflight %q: want two counts", b)
	}
	r, err1 := strconv.Atoi(f[0])
	w, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || r < 0 || w < 0 {
		return 0, 0, fmt.Errorf("inflight %q: want two counts", b)
	}
	return r, w, nil
}

// ParseTIDs reads a cgroup.threads (one thread id a line).
func ParseTIDs(b []byte) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("thread id %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Buckets are the in-flight histogram's bucket labels.
var Buckets = []string{"0", "1", "2", "3-4", "5-8", "9-16", "17-32", ">32"}

// Bucket is the index in Buckets of n requests in flight.
func Bucket(n int) int {
	switch {
	case n <= 2:
		return max(n, 0)
	case n <= 4:
		return 3
	case n <= 8:
		return 4
	case n <= 16:
		return 5
	case n <= 32:
		return 6
	}
	return 7
}

// Summary is what one sampling run found: the sampler's JSON output.
type Summary struct {
	Disk       string  `json:"disk"`
	IntervalMS float64 `json:"interval_ms"` // asked for
	Seconds    float64 `json:"seconds"`     // from the first sample to the last
	StartNS    int64   `json:"start_unix_ns"`
	EndNS      int64   `json:"end_unix_ns"`
	Samples    int     `json:"samples"`
	Groups     []Group `json:"groups"`
	// ReadsInflight and WritesInflight count the samples per bucket of
	// Buckets.
	ReadsInflight  []int `json:"reads_inflight"`
	WritesInflight []int `json:"writes_inflight"`
	// InflightErrors counts samples whose inflight file could not be read.
	InflightErrors int `json:"inflight_errors"`
	// Guest is the whole guest's CPU use and pressure over the run.
	Guest *CPUFigures `json:"guest,omitempty"`
	// Errors are what could not be read (a cgroup, a stack), with how
	// often; at most maxErrors distinct ones.
	Errors map[string]int `json:"errors,omitempty"`
}

const maxErrors = 20

// Group is one set of threads sampled together (etcd's unit, the fio
// job's, the journal threads).
type Group struct {
	Name        string         `json:"name"`
	Threads     int            `json:"threads_seen"`   // distinct thread ids over the run
	ThreadSamps int            `json:"thread_samples"` // sum over samples of the threads read
	States      map[string]int `json:"states"`         // thread-samples per state letter
	SamplesD    int            `json:"samples_with_d"` // samples with at least one thread in D
	Stacks      []Stack        `json:"stacks"`         // of the thread-samples in D, most first
	// CPU is a cgroup group's CPU use and pressure over the run.
	CPU *CPUFigures `json:"cpu,omitempty"`
	// ThreadsCPUSeconds is the CPU time its threads used between their
	// first and last samples (/proc's utime + stime): for a comm group
	// (kernel threads, which no cgroup accounts) the only CPU figure.
	ThreadsCPUSeconds float64 `json:"threads_cpu_s"`
}

// Stack is one folded kernel stack and how many thread-samples in D had it.
type Stack struct {
	Stack string `json:"stack"`
	Count int    `json:"count"`
}

// Stack labels for a thread seen in D whose stack says nothing of that
// wait: it ran again before its stack was read.
const (
	NoStack = "(running when its stack was read)"
	Woke    = "(no longer in D after its stack was read)"
)

// Aggregate accumulates samples into a Summary.
type Aggregate struct {
	groups                []*groupAgg // in the order named
	at                    map[string]*groupAgg
	samples, inflightErrs int
	reads, writes         [8]int
	errs                  map[string]int
	guest                 counterSpan
}

type groupAgg struct {
	name           string
	threads        map[int]bool
	states, stacks map[string]int
	threadSamples  int
	samplesD       int
	inSample       bool // a thread was in D in the current sample
	counters       counterSpan
	lastTicks      map[int]int64 // per thread, its CPU ticks at its last sample
	cpuTicks       int64         // the threads' CPU ticks between their samples
}

// NewAggregate aggregates for the named groups, in that order.
func NewAggregate(groups []string) *Aggregate {
	a := &Aggregate{at: map[string]*groupAgg{}, errs: map[string]int{}}
	for _, name := range groups {
		g := &groupAgg{name: name, threads: map[int]bool{}, states: map[string]int{}, stacks: map[string]int{}, lastTicks: map[int]int64{}}
		a.groups = append(a.groups, g)
		a.at[name] = g
	}
	return a
}

// BeginSample starts a sample; Thread and Inflight record into it.
func (a *Aggregate) BeginSample() {
	a.samples++
	for _, g := range a.groups {
		g.inSample = false
	}
}

// Thread records thread tid of group in state, with its CPU ticks so far
// (ParseStat); stack is its folded stack when in D. A thread's CPU counts
// from its first sample on: what it used before is not the run's.
func (a *Aggregate) Thread(group string, tid int, state byte, cpuTicks int64, stack string) {
	g, ok := a.at[group]
	if !ok {
		return
	}
	if last, seen := g.lastTicks[tid]; seen && cpuTicks >= last {
		g.cpuTicks += cpuTicks - last
	}
	g.lastTicks[tid] = cpuTicks
	g.threads[tid] = true
	g.threadSamples++
	g.states[string(state)]++
	if state != 'D' {
		return
	}
	if !g.inSample {
		g.inSample = true
		g.samplesD++
	}
	g.stacks[stack]++
}

// GuestName names the whole guest in Counters.
const GuestName = "guest"

// Counters records the cumulative CPU figures of group (a cgroup target,
// or GuestName) read at at; the summary has the change from the first
// reading to the last.
func (a *Aggregate) Counters(group string, at time.Time, c Counters) {
	if group == GuestName {
		a.guest.add(at, c)
	} else if g, ok := a.at[group]; ok {
		g.counters.add(at, c)
	}
}

// Inflight records the disk's requests in flight.
func (a *Aggregate) Inflight(reads, writes int) {
	a.reads[Bucket(reads)]++
	a.writes[Bucket(writes)]++
}

// InflightError records a sample without the disk's queue depth.
func (a *Aggregate) InflightError() { a.inflightErrs++ }

// Error records what could not be read.
func (a *Aggregate) Error(msg string) {
	if _, ok := a.errs[msg]; ok || len(a.errs) < maxErrors {
		a.errs[msg]++
	}
}

// Summary is what was aggregated; the caller sets the disk and times.
func (a *Aggregate) Summary() Summary {
	s := Summary{Samples: a.samples, ReadsInflight: slices.Clone(a.reads[:]), WritesInflight: slices.Clone(a.writes[:]),
		InflightErrors: a.inflightErrs, Guest: a.guest.figures()}
	if len(a.errs) > 0 {
		s.Errors = maps.Clone(a.errs)
	}
	for _, ga := range a.groups {
		g := Group{Name: ga.name, Threads: len(ga.threads), ThreadSamps: ga.threadSamples, States: maps.Clone(ga.states),
			SamplesD: ga.samplesD, CPU: ga.counters.figures(), ThreadsCPUSeconds: float64(ga.cpuTicks) / userHZ}
		for st, n := range ga.stacks {
			g.Stacks = append(g.Stacks, Stack{Stack: st, Count: n})
		}
		slices.SortFunc(g.Stacks, func(x, y Stack) int {
			if x.Count != y.Count {
				return y.Count - x.Count
			}
			return strings.Compare(x.Stack, y.Stack)
		})
		s.Groups = append(s.Groups, g)
	}
	return s
}

// Decode reads a summary and checks that it measured something: samples
// were taken and each of the groups named in need saw at least one thread
// (a wrong cgroup path sees none and would read as "never waited").
func Decode(b []byte, need ...string) (Summary, error) {
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return Summary{}, fmt.Errorf("kstacks summary: %w", err)
	}
	if s.Samples == 0 {
		return Summary{}, errors.New("kstacks summary: no sample taken")
	}
	if len(s.ReadsInflight) != len(Buckets) || len(s.WritesInflight) != len(Buckets) {
		return Summary{}, fmt.Errorf("kstacks summary: inflight histograms of %d and %d buckets, want %d", len(s.ReadsInflight), len(s.WritesInflight), len(Buckets))
	}
	for _, n := range need {
		i := slices.IndexFunc(s.Groups, func(g Group) bool { return g.Name == n })
		if i < 0 || s.Groups[i].Threads == 0 {
			return Summary{}, fmt.Errorf("kstacks summary: no thread of %s was sampled (errors: %s)", n, errorList(s.Errors))
		}
	}
	return s, nil
}

// Render writes s as text: per group the share of samples with a thread
// in D and its top stacks (count and share of the group's thread-samples
// in D), then the disk's in-flight histograms as shares of the samples.
func (s Summary) Render(w io.Writer, top int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "kstacks: %d samples over %.1f s (asked every %g ms, got one every %.1f ms)\n",
		s.Samples, s.Seconds, s.IntervalMS, 1000*s.Seconds/float64(max(s.Samples-1, 1)))
	if s.Guest != nil {
		fmt.Fprintf(&b, "guest: %s\n", s.Guest.Render())
	}
	for _, g := range s.Groups {
		d := g.States["D"]
		fmt.Fprintf(&b, "\n%s: %d threads; %d of %d samples (%s) with a thread in D; thread-samples by state: %s\n",
			g.Name, g.Threads, g.SamplesD, s.Samples, pct(g.SamplesD, s.Samples), states(g.States))
		if s.Seconds > 0 {
			fmt.Fprintf(&b, "  threads: used %.2f CPUs\n", g.ThreadsCPUSeconds/s.Seconds)
		}
		if g.CPU != nil {
			fmt.Fprintf(&b, "  cgroup: %s\n", g.CPU.Render())
			if g.CPU.IOCost != nil {
				fmt.Fprintf(&b, "  iocost: %s\n", g.CPU.IOCost.Render())
			}
		}
		for i, st := range g.Stacks {
			if i == top {
				rest := 0
				for _, r := range g.Stacks[top:] {
					rest += r.Count
				}
				fmt.Fprintf(&b, "  %6d %6s  (%d more stacks)\n", rest, pct(rest, d), len(g.Stacks)-top)
				break
			}
			fmt.Fprintf(&b, "  %6d %6s  %s\n", st.Count, pct(st.Count, d), st.Stack)
		}
	}
	fmt.Fprintf(&b, "\n%s: requests in flight (dispatched to the device), share of %d samples", s.Disk, s.Samples)
	if s.InflightErrors > 0 {
		fmt.Fprintf(&b, " (%d unreadable)", s.InflightErrors)
	}
	fmt.Fprintf(&b, "\n%-7s", "")
	for _, l := range Buckets {
		fmt.Fprintf(&b, "%7s", l)
	}
	for _, row := range []struct {
		name string
		h    []int
	}{{"writes", s.WritesInflight}, {"reads", s.ReadsInflight}} {
		fmt.Fprintf(&b, "\n%-7s", row.name)
		for _, n := range row.h {
			fmt.Fprintf(&b, "%7s", pct(n, s.Samples))
		}
	}
	b.WriteString("\n")
	if len(s.Errors) > 0 {
		fmt.Fprintf(&b, "\nunreadable: %s\n", errorList(s.Errors))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

// states renders the per-state counts, most first ("S 900, D 40, R 12").
func states(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int {
		if m[x] != m[y] {
			return m[y] - m[x]
		}
		return strings.Compare(x, y)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// errorList renders the errors, sorted, with their counts.
func errorList(errs map[string]int) string {
	if len(errs) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		out = append(out, fmt.Sprintf("%s (x%d)", k, errs[k]))
	}
	return strings.Join(out, "; ")
}

package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// One run per row decides nothing (run-to-run spread measured here: 1.5x
// on p99, 2-5x on max), so each scenario runs several times, interleaved,
// and the summary shows the median with the min-max of the repetitions.

// Spread is a figure over the repetitions: median, min, max of the known
// values (NaN when none is known).
type Spread struct {
	Med, Min, Max float64
	N             int
}

func spread(vals []float64) Spread {
	var v []float64
	for _, x := range vals {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Spread{math.NaN(), math.NaN(), math.NaN(), 0}
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Spread{med, v[0], v[len(v)-1], len(v)}
}

// String is "med [min-max]" with the given precision, "-" when unknown.
func (s Spread) format(prec int) string {
	if s.N == 0 {
		return "-"
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', prec, 64) }
	if s.N == 1 || s.Min == s.Max {
		return f(s.Med)
	}
	return f(s.Med) + " [" + f(s.Min) + "-" + f(s.Max) + "]"
}

// SummaryRow is one scenario under one load on one disk over its
// repetitions. Times in ms except the staging and setup phases (s).
type SummaryRow struct {
	Disk, Load, Scenario string
	Reps                 int
	MaxIsBound           bool
	P99, Max             Spread
	P99VsAlone           Spread
	MaxVsAlone           Spread
	P99VsNaive           Spread
	Staging, Setup       Spread
	StageVsNaive         Spread
	SetupP99VsAlone      Spread
	// Achieved is the share of the asked rate the load achieved (NaN when
	// it ran flat out); AgentCPU the agent's CPU seconds, CPUShare them
	// over the staging time (share of one core).
	Achieved, AgentCPU, CPUShare Spread
	// Floor is the staging's physical floor (s, FloorSeconds) and
	// Efficiency the floor over the staging time.
	Floor, Efficiency Spread
}

// Summary groups the rows by disk, load and scenario, in the order first
// measured.
func (t Table) Summary() []SummaryRow {
	type key struct{ disk, load, scenario string }
	var order []key
	groups := map[key][]Row{}
	for _, r := range t.Rows {
		k := key{r.Disk, r.Load, r.Scenario}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1000 }
	nz := func(d time.Duration, f float64) float64 {
		if d <= 0 {
			return math.NaN()
		}
		return f
	}
	var out []SummaryRow
	for _, k := range order {
		rows := groups[k]
		col := func(f func(Row, Ratios) float64) Spread {
			v := make([]float64, len(rows))
			for i, r := range rows {
				v[i] = f(r, t.Ratios(r))
			}
			return spread(v)
		}
		out = append(out, SummaryRow{
			Disk: k.disk, Load: k.load, Scenario: k.scenario, Reps: len(rows), MaxIsBound: rows[0].MaxIsBound,
			P99:             col(func(r Row, _ Ratios) float64 { return ms(r.P99) }),
			Max:             col(func(r Row, _ Ratios) float64 { return ms(r.Max) }),
			P99VsAlone:      col(func(_ Row, q Ratios) float64 { return q.P99VsAlone }),
			MaxVsAlone:      col(func(_ Row, q Ratios) float64 { return q.MaxVsAlone }),
			P99VsNaive:      col(func(_ Row, q Ratios) float64 { return q.P99VsNaive }),
			Staging:         col(func(r Row, _ Ratios) float64 { return nz(r.Staging, r.Staging.Seconds()) }),
			Setup:           col(func(r Row, _ Ratios) float64 { return nz(r.Setup, r.Setup.Seconds()) }),
			StageVsNaive:    col(func(_ Row, q Ratios) float64 { return q.StageVsNaive }),
			SetupP99VsAlone: col(func(_ Row, q Ratios) float64 { return q.SetupP99VsAlone }),
			Achieved: col(func(r Row, _ Ratios) float64 {
				if r.Asked <= 0 {
					return math.NaN()
				}
				return r.Rate / r.Asked
			}),
			AgentCPU: col(func(r Row, _ Ratios) float64 { return nz(r.AgentCPU, r.AgentCPU.Seconds()) }),
			CPUShare: col(func(r Row, _ Ratios) float64 {
				return nz(r.AgentCPU, nz(r.Staging, r.AgentCPU.Seconds()/r.Staging.Seconds()))
			}),
			Floor: col(func(r Row, _ Ratios) float64 { return nz(r.Staging, t.floor(r)) }),
			Efficiency: col(func(r Row, _ Ratios) float64 {
				return nz(r.Staging, t.floor(r)/r.Staging.Seconds())
			}),
		})
	}
	return out
}

var summaryHeader = []string{"disk", "load", "scenario", "reps", "p99_ms", "max_ms", "p99/a", "max/a", "p99/b",
	"setup_s", "setup_p99/a", "staging_s", "staging/b", "floor_s", "efficiency", "achieved/asked", "agent_cpu_s"}

// floor is r's staging floor against its repetition's (a) (the measured
// (a), noisy or not: the loads' I/O rate, not their latency).
func (t Table) floor(r Row) float64 {
	a, ok := t.find(r.Disk, r.Load, ScenarioAlone, r.Rep)
	if !ok {
		return math.NaN()
	}
	return FloorSeconds(r.IO, a.IO, r.Limits)
}

// WriteSummary prints the summary (median [min-max] over the repetitions)
// aligned for a terminal or a markdown code block, then the targets.
func (t Table) WriteSummary(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(summaryHeader, "\t")+"\t")
	for _, s := range t.Summary() {
		maxCell := s.Max.format(1)
		if s.MaxIsBound && maxCell != "-" {
			maxCell = "<=" + maxCell
		}
		fmt.Fprintln(tw, strings.Join([]string{s.Disk, s.Load, s.Scenario, strconv.Itoa(s.Reps),
			s.P99.format(1), maxCell, s.P99VsAlone.format(2), s.MaxVsAlone.format(2), s.P99VsNaive.format(2),
			s.Setup.format(2), s.SetupP99VsAlone.format(2), s.Staging.format(1), s.StageVsNaive.format(2),
			s.Floor.format(1), s.Efficiency.format(2), s.Achieved.format(3), s.AgentCPU.format(1)}, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range t.Targets() {
		if _, err := fmt.Fprintln(w, c); err != nil {
			return err
		}
	}
	for _, n := range t.NoisyAlone() {
		if _, err := fmt.Fprintf(w, "noisy alone repetition (its ratios use the other repetitions' alone medians): %s\n", n); err != nil {
			return err
		}
	}
	return nil
}

// Target is one of the goals checked on the medians of one (d)
// summary row.
type Target struct {
	Row  SummaryRow
	What string
	Got  string
	Met  bool
	// Unmeasured: the run has no figure for it (no baseline, as the demo
	// has no naive staging); never met, and not called missed either.
	Unmeasured bool
}

func (c Target) String() string {
	verdict := "MISSED"
	switch {
	case c.Met:
		verdict = "met"
	case c.Unmeasured:
		verdict = "not measured in this run"
	}
	return fmt.Sprintf("target %s/%s %s: %s (median %s)", c.Row.Disk, c.Row.Load, c.What, verdict, c.Got)
}

// The open issues' targets (pacing, tenants), on the defaults (d).
const (
	// P99Limit: etcd's and the fio job's p99 against alone, unless the
	// run's CPU-only line (CPUOnlyScenario) is higher.
	P99Limit = 1.3
	// ScaleModelP99: the scale-model disks' p99 limit against alone.
	ScaleModelP99 = 2.0
	// FioMaxMS: the fio job's slowest write+fdatasync; EtcdWorstMS:
	// etcd's worst histogram bucket.
	FioMaxMS, EtcdWorstMS = 250.0, 256.0
	// StagingLimit: staging time against plain staging (b).
	StagingLimit = 3.0
	// AgentCPULimit: the agent's CPU over the staging time, share of a
	// core.
	AgentCPULimit = 0.03
	// CPUOnlyScenario burns CPU with the staging unit's CPU policy and
	// writes nothing: where the 2-vCPU guest's CPU alone costs etcd more
	// than P99Limit, its ratio is the line the issue holds the agent to.
	CPUOnlyScenario = "x-cpuburn-idle"
)

// Targets checks the open issues' goals on the medians of every (d)
// summary row: p99 <= 1.3x (a), or the CPU-only line where the run
// measured one and it is higher, 2x on a scale-model disk; max <= 250 ms
// for the fio job, worst bucket <= 256 ms for etcd; staging <= 3x (b);
// setup-phase p99 within the p99 limit; puts achieved >= 99% of asked;
// agent CPU <= 3% of one core. Reported, not asserted: a missed target
// is a finding, not a test failure. An unknown figure (no baseline)
// never counts as met.
func (t Table) Targets() []Target {
	var out []Target
	le := func(s Spread, lim float64) bool { return s.N > 0 && s.Med <= lim }
	cpuOnly := map[[2]string]Spread{}
	for _, r := range t.Summary() {
		if r.Scenario == CPUOnlyScenario {
			cpuOnly[[2]string{r.Disk, r.Load}] = r.P99VsAlone
		}
	}
	for _, r := range t.Summary() {
		if r.Scenario != ScenarioAgent {
			continue
		}
		p99Lim, p99What := P99Limit, fmt.Sprintf("p99 <= %.1fx alone", P99Limit)
		if slices.Contains(t.ScaleModel, r.Disk) {
			p99Lim, p99What = ScaleModelP99, fmt.Sprintf("p99 <= %.0fx alone (scale model)", ScaleModelP99)
		} else if c := cpuOnly[[2]string{r.Disk, r.Load}]; c.N > 0 && c.Med > p99Lim {
			p99Lim, p99What = c.Med, fmt.Sprintf("p99 <= the CPU-only line x%.2f", c.Med)
		}
		maxLim, maxWhat := FioMaxMS, fmt.Sprintf("max <= %.0fms", FioMaxMS)
		if r.MaxIsBound {
			maxLim, maxWhat = EtcdWorstMS, fmt.Sprintf("worst bucket <= %.0fms", EtcdWorstMS)
		}
		stageWhat := fmt.Sprintf("staging <= %.0fx naive", StagingLimit)
		out = append(out,
			Target{r, p99What, "x" + r.P99VsAlone.format(2), le(r.P99VsAlone, p99Lim), r.P99VsAlone.N == 0},
			Target{r, maxWhat, r.Max.format(1) + "ms", le(r.Max, maxLim), r.Max.N == 0},
			Target{r, stageWhat, "x" + r.StageVsNaive.format(2), le(r.StageVsNaive, StagingLimit), r.StageVsNaive.N == 0})
		if r.SetupP99VsAlone.N > 0 {
			out = append(out, Target{r, strings.Replace(p99What, "p99", "setup p99", 1), "x" + r.SetupP99VsAlone.format(2), le(r.SetupP99VsAlone, p99Lim), false})
		}
		if r.Achieved.N > 0 {
			out = append(out, Target{r, "achieved >= 99% of asked", r.Achieved.format(3), r.Achieved.Med >= 0.99, false})
		}
		if r.CPUShare.N > 0 {
			out = append(out, Target{r, fmt.Sprintf("agent CPU <= %.0f%% of a core", AgentCPULimit*100), r.CPUShare.format(3), le(r.CPUShare, AgentCPULimit), false})
		}
	}
	return out
}

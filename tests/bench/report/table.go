// Package report turns measured latency rows into the benchmark's table
// (text and CSV), with ratios to the baseline measured in the same run, and
// plots latency over time as a PNG.
package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The two scenarios every other one is compared with, in the same run, on
// the same disk and load.
const (
	ScenarioAlone = "a-alone" // the load alone, nothing staged
	ScenarioNaive = "b-naive" // plain rpm-ostree upgrade, default scheduler
	ScenarioAgent = "d-agent" // update-agent with its defaults: the targets apply
)

// Row is one measured scenario under one load on one disk.
type Row struct {
	Disk     string // e.g. "3000iops-125MBs"
	Load     string // e.g. "fio-rate333", "fio-unlimited", "etcd"
	Scenario string
	// Rep is the repetition (1, 2, ...): repetitions are interleaved
	// (a, b, d, a, b, d, ...) and each row is compared with (a) and (b)
	// of its own repetition.
	Rep int
	// Staging is the wall time of the staging; 0 when nothing was staged.
	Staging time.Duration
	N       int64 // fdatasyncs measured
	// Rate is N per second of the load's run: what the load achieved,
	// against Asked, what it asked for (a starved guest falls short; 0:
	// flat out).
	Rate  float64
	Asked float64
	// Setup is how long the agent took to open the window (its "staging
	// setup done" line), SetupP99 etcd's worst WAL fsync p99 in the scrapes
	// covering it (0: no setup phase or not measured), AgentCPU the
	// agent's CPU seconds for the staging (user + system).
	Setup    time.Duration
	SetupP99 time.Duration
	// SetupScrapes is how many scrapes SetupP99 is the worst of;
	// ScrapeP99s are every scrape's p99 over the run, in order (etcd rows
	// only). Against (a)'s, a setup's worst of k scrapes is compared with
	// the typical worst of k consecutive scrapes alone, not with (a)'s p99
	// over the whole run, which one 2 s window's p99 exceeds by itself.
	SetupScrapes int
	ScrapeP99s   []time.Duration
	AgentCPU     time.Duration
	P50          time.Duration
	P99          time.Duration
	P999         time.Duration
	Max          time.Duration
	// MaxIsBound says Max is a histogram bucket bound (etcd's metrics), not
	// the observed maximum.
	MaxIsBound bool
	// MaxOver says the largest observation was above every finite bucket:
	// Max is then the largest finite bound, a lower bound.
	MaxOver bool
	// IO is what the measured disk did during the staging window, or
	// during (a)'s measurement; Limits the disk's throttle (0: unknown).
	IO     DiskIO
	Limits Limits
}

// Ratios are a row's figures divided by its baseline rows'. NaN where the
// baseline is missing or zero.
type Ratios struct {
	P99VsAlone, MaxVsAlone   float64
	P99VsNaive, StageVsNaive float64
	// SetupP99VsAlone is etcd's worst p99 of the scrapes during the setup
	// phase against (a)'s typical worst of as many consecutive scrapes
	// (TypicalWorst).
	SetupP99VsAlone float64
}

// Table is the rows of one run, in the order measured.
type Table struct {
	Rows []Row
	// ScaleModel names the scale-model disks (Row.Disk): slow enough that
	// the disk, not the guest's CPU, bounds etcd; their p99 target is
	// ScaleModelP99 x alone.
	ScaleModel []string
}

func (t Table) find(disk, load, scenario string, rep int) (Row, bool) {
	for _, r := range t.Rows {
		if r.Disk == disk && r.Load == load && r.Scenario == scenario && r.Rep == rep {
			return r, true
		}
	}
	return Row{}, false
}

func ratio(a, b time.Duration, ok bool) float64 {
	if !ok || b <= 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// Ratios compares r with (a) and (b) of its disk, load and repetition
// ((a)'s p99 and max taken from the other repetitions where that (a) is
// noise: NoisyAlone).
func (t Table) Ratios(r Row) Ratios {
	a, okA := t.aloneFor(r.Disk, r.Load, r.Rep)
	b, okB := t.find(r.Disk, r.Load, ScenarioNaive, r.Rep)
	return Ratios{
		P99VsAlone:      ratio(r.P99, a.P99, okA),
		MaxVsAlone:      ratio(r.Max, a.Max, okA),
		P99VsNaive:      ratio(r.P99, b.P99, okB),
		StageVsNaive:    ratio(r.Staging, b.Staging, okB && r.Staging > 0),
		SetupP99VsAlone: ratio(r.SetupP99, TypicalWorst(a.ScrapeP99s, r.SetupScrapes), okA && r.SetupP99 > 0),
	}
}

// TypicalWorst is the median, over every run of k consecutive values of
// p99s, of the run's largest: what the worst of k scrapes is when nothing
// happens. 0 when there are fewer than k values (or k < 1).
func TypicalWorst(p99s []time.Duration, k int) time.Duration {
	if k < 1 || len(p99s) < k {
		return 0
	}
	worst := make([]time.Duration, 0, len(p99s)-k+1)
	for i := 0; i+k <= len(p99s); i++ {
		worst = append(worst, slices.Max(p99s[i:i+k]))
	}
	slices.Sort(worst)
	n := len(worst)
	if n%2 == 1 {
		return worst[n/2]
	}
	return (worst[n/2-1] + worst[n/2]) / 2
}

var header = []string{"disk", "load", "scenario", "rep", "setup_s", "setup_p99_ms", "staging_s", "agent_cpu_s",
	"fdatasyncs", "per_s", "asked_per_s", "p50_ms", "p99_ms", "p99.9_ms", "max_ms", "p99/a", "max/a", "p99/b", "staging/b", "floor_s", "efficiency"}

func fmtMS(d time.Duration) string { return strconv.FormatFloat(d.Seconds()*1000, 'f', 2, 64) }

func num(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

func (t Table) fields(r Row) []string {
	q := t.Ratios(r)
	stage := "-"
	if r.Staging > 0 {
		stage = strconv.FormatFloat(r.Staging.Seconds(), 'f', 1, 64)
	}
	max := fmtMS(r.Max)
	switch {
	case r.MaxOver:
		max = ">" + max
	case r.MaxIsBound:
		max = "<=" + max
	}
	rate := "-"
	if r.Rate > 0 {
		rate = strconv.FormatFloat(r.Rate, 'f', 1, 64)
	}
	asked, setup, setupP99, cpu := "-", "-", "-", "-"
	if r.Asked > 0 {
		asked = strconv.FormatFloat(r.Asked, 'f', 0, 64)
	}
	if r.Setup > 0 {
		setup = strconv.FormatFloat(r.Setup.Seconds(), 'f', 2, 64)
	}
	if r.SetupP99 > 0 {
		setupP99 = fmtMS(r.SetupP99)
	}
	if r.AgentCPU > 0 {
		cpu = strconv.FormatFloat(r.AgentCPU.Seconds(), 'f', 2, 64)
	}
	floor, eff := "-", "-"
	if r.Staging > 0 {
		f := t.floor(r)
		floor, eff = strconv.FormatFloat(f, 'f', 1, 64), num(f/r.Staging.Seconds())
		if math.IsNaN(f) {
			floor = "-"
		}
	}
	return []string{r.Disk, r.Load, r.Scenario, strconv.Itoa(r.Rep), setup, setupP99, stage, cpu,
		strconv.FormatInt(r.N, 10), rate, asked, fmtMS(r.P50), fmtMS(r.P99), fmtMS(r.P999), max,
		num(q.P99VsAlone), num(q.MaxVsAlone), num(q.P99VsNaive), num(q.StageVsNaive), floor, eff}
}

// WriteText prints the table aligned for a terminal.
func (t Table) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(t.fields(r), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nil
}

// WriteCSV writes the table as CSV with a header line.
func (t Table) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, r := range t.Rows {
		if err := cw.Write(t.fields(r)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// Package report turns measured latency rows into the benchmark's table
// (text and CSV), with ratios to the baseline measured in the same run, and
// plots latency over time as a PNG.
package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
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
	// Staging is the wall time of the staging; 0 when nothing was staged.
	Staging time.Duration
	N       int64 // fdatasyncs measured
	// Rate is N per second of the load's run: what the load achieved,
	// against what it asked for (a starved guest falls short).
	Rate float64
	P50  time.Duration
	P99  time.Duration
	P999 time.Duration
	Max  time.Duration
	// MaxIsBound says Max is a histogram bucket bound (etcd's metrics), not
	// the observed maximum.
	MaxIsBound bool
	// MaxOver says the largest observation was above every finite bucket:
	// Max is then the largest finite bound, a lower bound.
	MaxOver bool
}

// Ratios are a row's figures divided by its baseline rows'. NaN where the
// baseline is missing or zero.
type Ratios struct {
	P99VsAlone, MaxVsAlone   float64
	P99VsNaive, StageVsNaive float64
}

// Table is the rows of one run, in the order measured.
type Table struct{ Rows []Row }

func (t Table) find(disk, load, scenario string) (Row, bool) {
	for _, r := range t.Rows {
		if r.Disk == disk && r.Load == load && r.Scenario == scenario {
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

// Ratios compares r with (a) and (b) of its disk and load.
func (t Table) Ratios(r Row) Ratios {
	a, okA := t.find(r.Disk, r.Load, ScenarioAlone)
	b, okB := t.find(r.Disk, r.Load, ScenarioNaive)
	return Ratios{
		P99VsAlone:   ratio(r.P99, a.P99, okA),
		MaxVsAlone:   ratio(r.Max, a.Max, okA),
		P99VsNaive:   ratio(r.P99, b.P99, okB),
		StageVsNaive: ratio(r.Staging, b.Staging, okB && r.Staging > 0),
	}
}

var header = []string{"disk", "load", "scenario", "staging_s", "fdatasyncs", "per_s",
	"p50_ms", "p99_ms", "p99.9_ms", "max_ms", "p99/a", "max/a", "p99/b", "staging/b"}

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
	return []string{r.Disk, r.Load, r.Scenario, stage, strconv.FormatInt(r.N, 10), rate,
		fmtMS(r.P50), fmtMS(r.P99), fmtMS(r.P999), max,
		num(q.P99VsAlone), num(q.MaxVsAlone), num(q.P99VsNaive), num(q.StageVsNaive)}
}

// WriteText prints the table aligned for a terminal, then the targets.
func (t Table) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(t.fields(r), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range t.Targets() {
		if _, err := fmt.Fprintln(w, c); err != nil {
			return err
		}
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

// Target is one of the goals checked on one (d) row.
type Target struct {
	Row  Row
	What string
	Got  string
	Met  bool
}

func (c Target) String() string {
	verdict := "MISSED"
	if c.Met {
		verdict = "met"
	}
	return fmt.Sprintf("target %s/%s %s: %s (%s)", c.Row.Disk, c.Row.Load, c.What, verdict, c.Got)
}

// Targets checks the goals on every (d) row: p99 <= 1.3x (a), max <= 100 ms,
// staging time <= 2x (b). They are reported, not asserted: the machine is
// noisy and a missed target is a finding, not a test failure.
func (t Table) Targets() []Target {
	var out []Target
	for _, r := range t.Rows {
		if r.Scenario != ScenarioAgent {
			continue
		}
		q := t.Ratios(r)
		out = append(out,
			Target{r, "p99 <= 1.3x alone", "x" + num(q.P99VsAlone), q.P99VsAlone <= 1.3},
			Target{r, "max <= 100ms", fmtMS(r.Max) + "ms", r.Max <= 100*time.Millisecond},
			Target{r, "staging <= 2x naive", "x" + num(q.StageVsNaive), q.StageVsNaive <= 2})
	}
	return out
}

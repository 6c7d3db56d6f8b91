package latency

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/update-agent/update-agent/tests/bench/fio"
	"github.com/update-agent/update-agent/tests/bench/promhist"
	"github.com/update-agent/update-agent/tests/bench/report"
)

// WALFsync is etcd's WAL fsync histogram.
const WALFsync = "etcd_disk_wal_fsync_duration_seconds"

// Measured is what one scenario left behind, as read from the guest.
type Measured struct {
	Disk     Disk
	Scenario Scenario
	Rep      int // repetition, from 1
	PutRate  int
	Window   Window // zero when nothing was staged
	// AloneIO is what the disk did while the loads ran alone ((a) only):
	// their I/O rate, which a staging's floor subtracts.
	AloneIO  report.DiskIO
	Loads    Loads
	FioJSON  []byte
	FioLat   []byte // --write_lat_log of the fio job
	EtcdPre  []byte // histogram exposition before
	EtcdPost []byte // and after
	EtcdLine []byte // putload's timeline.csv
	EtcdPuts []byte // putload's summary.json: the puts served
	StageLog []byte // update-agent's log of the staging (Agent only): the guard's decisions
	Profile  []byte // stage-once's CPU profile (Scenario.Profile)
	KStacks  []byte // where etcd's and fio's threads waited, as text (Scenario.Profile)
}

// Rows are the table rows of m: the fio job and the etcd member. A missing
// or unreadable piece is an error: the table never shows made-up numbers.
func (m Measured) Rows() ([]report.Row, error) {
	rep, err := fio.ParseJSON(bytes.NewReader(m.FioJSON))
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", m.Disk.Name, m.Scenario.ID, err)
	}
	j := rep.Jobs[0]
	if j.Error != 0 || j.Sync.N == 0 {
		return nil, fmt.Errorf("%s/%s: fio job error %d, %d fdatasyncs", m.Disk.Name, m.Scenario.ID, j.Error, j.Sync.N)
	}
	setup, setupStart, setupEnd, err := SetupPhase(m.StageLog)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", m.Disk.Name, m.Scenario.ID, err)
	}
	row := report.Row{Disk: m.Disk.Name, Load: m.Scenario.Load(m.Disk), Scenario: m.Scenario.ID, Rep: m.Rep,
		Staging: m.Window.Duration(), N: j.Sync.N, Max: j.Sync.Max, Setup: setup, AgentCPU: m.Window.AgentCPU}
	if !m.Scenario.FioUnlimited {
		row.Asked = float64(m.Disk.FioRate)
	}
	if j.Runtime > 0 {
		row.Rate = float64(j.Sync.N) / j.Runtime.Seconds()
	}
	for _, p := range []struct {
		q   float64
		dst *time.Duration
	}{{50, &row.P50}, {99, &row.P99}, {99.9, &row.P999}} {
		if *p.dst, err = j.Sync.Percentile(p.q); err != nil {
			return nil, fmt.Errorf("%s/%s: %w", m.Disk.Name, m.Scenario.ID, err)
		}
	}
	pre, err := promhist.Parse(bytes.NewReader(m.EtcdPre), WALFsync)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: etcd before: %w", m.Disk.Name, m.Scenario.ID, err)
	}
	post, err := promhist.Parse(bytes.NewReader(m.EtcdPost), WALFsync)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: etcd after: %w", m.Disk.Name, m.Scenario.ID, err)
	}
	d, err := post.Sub(pre)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: etcd: %w", m.Disk.Name, m.Scenario.ID, err)
	}
	if d.Total() == 0 {
		return nil, fmt.Errorf("%s/%s: etcd recorded no WAL fsync", m.Disk.Name, m.Scenario.ID)
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	load := fmt.Sprintf("etcd-%dput/s", m.PutRate)
	if m.Scenario.SplitFS {
		load += "-splitfs"
	}
	if m.Scenario.FioUnlimited {
		load += "+fio-unlimited"
	}
	erow := report.Row{Disk: m.Disk.Name, Load: load, Scenario: m.Scenario.ID, Rep: m.Rep,
		Staging: m.Window.Duration(), N: int64(d.Total()), Asked: float64(m.PutRate),
		Setup: setup, AgentCPU: m.Window.AgentCPU,
		P50: sec(d.Quantile(0.5)), P99: sec(d.Quantile(0.99)), P999: sec(d.Quantile(0.999)),
		MaxIsBound: true}
	if erow.ScrapeP99s, err = scrapeP99s(m.EtcdLine); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", m.Disk.Name, m.Scenario.ID, err)
	}
	if erow.Rate, err = putsServed(m.EtcdPuts); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", m.Disk.Name, m.Scenario.ID, err)
	}
	if mb := d.MaxBound(); math.IsInf(mb, 1) {
		erow.Max, erow.MaxOver = sec(d.Buckets[len(d.Buckets)-2].Le), true
	} else {
		erow.Max = sec(mb)
	}
	if setup > 0 {
		if erow.SetupP99, erow.SetupScrapes, err = worstP99(m.EtcdLine, setupStart, setupEnd); err != nil {
			return nil, fmt.Errorf("%s/%s: %w", m.Disk.Name, m.Scenario.ID, err)
		}
	}
	io := m.Window.IO
	if m.Scenario.Stager == NoStaging {
		io = m.AloneIO
	}
	lim := report.Limits{IOPS: float64(m.Disk.IOPS), BPS: float64(m.Disk.BPS)}
	row.IO, row.Limits, erow.IO, erow.Limits = io, lim, io, lim
	return []report.Row{row, erow}, nil
}

// putsServed is the puts per second etcd served (putload's summary.json),
// not its WAL fsyncs per second: etcd puts the proposals that arrive during
// a slow fsync into the next one, so fsyncs fall short of puts without a
// put being lost.
func putsServed(summary []byte) (float64, error) {
	var s struct {
		Served  *int64   `json:"served"`
		Seconds *float64 `json:"seconds"`
	}
	if err := json.Unmarshal(summary, &s); err != nil {
		return 0, fmt.Errorf("putload summary: %w", err)
	}
	if s.Served == nil || s.Seconds == nil || *s.Seconds <= 0 {
		return 0, fmt.Errorf("putload summary without served puts or seconds: %q", summary)
	}
	return float64(*s.Served) / *s.Seconds, nil
}

// SetupPhase finds the agent's setup phase in its log (the "staging setup
// started" and "staging setup done" lines): its duration as the agent
// measured it, and when it ran (guest clock, Unix ns). Zero without a log
// or those lines (no agent, or an agent from before the phase existed).
func SetupPhase(log []byte) (time.Duration, int64, int64, error) {
	var start, end int64
	var secs float64
	for _, line := range strings.Split(string(log), "\n") {
		started := strings.Contains(line, `msg="staging setup started"`)
		done := strings.Contains(line, `msg="staging setup done"`)
		if !started && !done {
			continue
		}
		ts, ok := logField(line, "time")
		if !ok {
			return 0, 0, 0, fmt.Errorf("setup phase: no time in %q", line)
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("setup phase: %w", err)
		}
		if started {
			start = at.UnixNano()
			continue
		}
		end = at.UnixNano()
		v, _ := logField(line, "setup_seconds")
		if secs, err = strconv.ParseFloat(v, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("setup phase: setup_seconds in %q", line)
		}
	}
	if start == 0 || end == 0 {
		return 0, 0, 0, nil
	}
	return time.Duration(secs * float64(time.Second)), start, end, nil
}

// logField is key's value in a slog text line (unquoted values only).
func logField(line, key string) (string, bool) {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// scrape is one line of putload's timeline: a scrape at End (Unix ns)
// covering the time since Start, the previous one (0 for the first).
type scrape struct {
	Start, End int64
	P99        time.Duration
	HasP99     bool // no fsync in the interval: no p99
}

func scrapes(timeline []byte) ([]scrape, error) {
	recs, err := csv.NewReader(bytes.NewReader(timeline)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("etcd timeline: %w", err)
	}
	var out []scrape
	var prev int64
	for i, r := range recs {
		if i == 0 || len(r) < 4 {
			continue
		}
		ms, err := strconv.ParseInt(r[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("etcd timeline line %d: %q", i+1, r)
		}
		sc := scrape{Start: prev, End: ms * int64(time.Millisecond)}
		if r[3] != "" {
			p99, err := strconv.ParseFloat(r[3], 64)
			if err != nil {
				return nil, fmt.Errorf("etcd timeline line %d: %q", i+1, r)
			}
			sc.P99, sc.HasP99 = time.Duration(p99*float64(time.Second)), true
		}
		out = append(out, sc)
		prev = sc.End
	}
	return out, nil
}

// scrapeP99s are the per-scrape p99s of the timeline, in order.
func scrapeP99s(timeline []byte) ([]time.Duration, error) {
	scs, err := scrapes(timeline)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, sc := range scs {
		if sc.HasP99 {
			out = append(out, sc.P99)
		}
	}
	return out, nil
}

// worstP99 is the largest per-scrape p99 of putload's timeline among the
// scrapes whose interval overlaps [startNS, endNS], and how many those
// were: etcd's latency during a phase, at the timeline's resolution (2 s).
func worstP99(timeline []byte, startNS, endNS int64) (time.Duration, int, error) {
	scs, err := scrapes(timeline)
	if err != nil {
		return 0, 0, err
	}
	var worst time.Duration
	n := 0
	for _, sc := range scs {
		if sc.Start != 0 && sc.End >= startNS && sc.Start <= endNS && sc.HasP99 {
			n++
			worst = max(worst, sc.P99)
		}
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("etcd timeline has no scrape covering the setup phase")
	}
	return worst, n, nil
}

// Panel is m's timeline: the gaps between the fio job's WAL appends and
// etcd's slowest fsync bucket per second, the staging window shaded; the
// time axis starts when the loads started.
func (m Measured) Panel() (report.Panel, error) {
	samples, err := fio.ParseLatLog(bytes.NewReader(m.FioLat))
	if err != nil {
		return report.Panel{}, err
	}
	var fioPts []report.Point
	for _, s := range fio.SyncStalls(samples) {
		fioPts = append(fioPts, report.Point{At: s.At, Lat: s.Gap})
	}
	etcdPts, err := etcdTimeline(m.EtcdLine, m.Loads.StartNS)
	if err != nil {
		return report.Panel{}, err
	}
	p := report.Panel{
		Title: fmt.Sprintf("%s %s %s", m.Disk.Name, m.Scenario.ID, m.Scenario.Load(m.Disk)),
		Series: []report.Series{
			{Label: "fio: gap between wal appends (>= fdatasync)", Color: report.Blue, Points: fioPts},
			{Label: "etcd: slowest wal fsync bucket per 2 s", Color: report.Orange, Points: etcdPts},
		},
		ThresholdLine: 100 * time.Millisecond,
	}
	if m.Window.End > 0 {
		p.StageStart = time.Duration(m.Window.Start - m.Loads.StartNS)
		p.StageEnd = time.Duration(m.Window.End - m.Loads.StartNS)
	}
	if _, s, e, err := SetupPhase(m.StageLog); err == nil && e > 0 {
		p.SetupStart, p.SetupEnd = time.Duration(s-m.Loads.StartNS), time.Duration(e-m.Loads.StartNS)
	}
	return p, nil
}

// Curves are m's latency CDFs: the fio job's gaps between WAL appends and
// etcd's WAL fsync histogram over the scenario.
func (m Measured) Curves() (fioCurve, etcdCurve report.Curve, err error) {
	label := m.Scenario.ID
	samples, err := fio.ParseLatLog(bytes.NewReader(m.FioLat))
	if err != nil {
		return fioCurve, etcdCurve, err
	}
	fioCurve.Label = label
	for _, s := range fio.SyncStalls(samples) {
		fioCurve.Lats = append(fioCurve.Lats, s.Gap)
	}
	pre, err := promhist.Parse(bytes.NewReader(m.EtcdPre), WALFsync)
	if err != nil {
		return fioCurve, etcdCurve, err
	}
	post, err := promhist.Parse(bytes.NewReader(m.EtcdPost), WALFsync)
	if err != nil {
		return fioCurve, etcdCurve, err
	}
	d, err := post.Sub(pre)
	if err != nil {
		return fioCurve, etcdCurve, err
	}
	etcdCurve.Label = label
	if tot := d.Total(); tot > 0 {
		for _, b := range d.Buckets {
			if math.IsInf(b.Le, 1) {
				continue
			}
			etcdCurve.Steps = append(etcdCurve.Steps, report.Step{Le: time.Duration(b.Le * float64(time.Second)), Share: b.Count / tot})
		}
	}
	return fioCurve, etcdCurve, nil
}

// etcdTimeline reads putload's timeline.csv into points relative to startNS.
func etcdTimeline(b []byte, startNS int64) ([]report.Point, error) {
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("etcd timeline: %w", err)
	}
	var out []report.Point
	for i, r := range recs {
		if i == 0 || len(r) < 5 || r[4] == "" {
			continue
		}
		ms, err1 := strconv.ParseInt(r[0], 10, 64)
		maxS, err2 := strconv.ParseFloat(r[4], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("etcd timeline line %d: %q", i+1, r)
		}
		if maxS <= 0 {
			continue
		}
		out = append(out, report.Point{
			At:  time.Duration(ms*int64(time.Millisecond) - startNS),
			Lat: time.Duration(maxS * float64(time.Second)),
		})
	}
	return out, nil
}

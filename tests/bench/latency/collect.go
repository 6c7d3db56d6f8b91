package latency

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"math"
	"strconv"
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
	PutRate  int
	Window   Window // zero when nothing was staged
	Loads    Loads
	FioJSON  []byte
	FioLat   []byte // --write_lat_log of the fio job
	EtcdPre  []byte // histogram exposition before
	EtcdPost []byte // and after
	EtcdLine []byte // putload's timeline.csv
	StageLog []byte // update-agent's log of the staging (Agent only): the guard's decisions
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
	row := report.Row{Disk: m.Disk.Name, Load: m.Scenario.Load(m.Disk), Scenario: m.Scenario.ID,
		Staging: m.Window.Duration(), N: j.Sync.N, Max: j.Sync.Max}
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
	erow := report.Row{Disk: m.Disk.Name, Load: load, Scenario: m.Scenario.ID,
		Staging: m.Window.Duration(), N: int64(d.Total()),
		P50: sec(d.Quantile(0.5)), P99: sec(d.Quantile(0.99)), P999: sec(d.Quantile(0.999)),
		MaxIsBound: true}
	if j.Runtime > 0 {
		// Both loads start and stop together.
		erow.Rate = float64(erow.N) / j.Runtime.Seconds()
	}
	if mb := d.MaxBound(); math.IsInf(mb, 1) {
		erow.Max, erow.MaxOver = sec(d.Buckets[len(d.Buckets)-2].Le), true
	} else {
		erow.Max = sec(mb)
	}
	return []report.Row{row, erow}, nil
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
	return p, nil
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

// Package fio reads what fio writes: its JSON report (--output-format=json)
// and its per-I/O latency log (--write_lat_log), and builds the command line
// of the etcd-like WAL job the benchmarks run.
package fio

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Latency is one latency distribution from fio's report.
type Latency struct {
	N        int64
	Min, Max time.Duration
	Mean     time.Duration
	// Percentiles maps a percentile (50, 99, 99.9) to its value.
	Percentiles map[float64]time.Duration
}

// Percentile returns the value fio reported for p, or an error naming p when
// fio was not asked for it (so a table never shows a made-up number).
func (l Latency) Percentile(p float64) (time.Duration, error) {
	for k, v := range l.Percentiles {
		if abs(k-p) < 1e-9 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("fio reported no %g percentile (have %v)", p, l.keys())
}

func (l Latency) keys() []float64 {
	ks := make([]float64, 0, len(l.Percentiles))
	for k := range l.Percentiles {
		ks = append(ks, k)
	}
	sort.Float64s(ks)
	return ks
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// Job is one job of fio's report.
type Job struct {
	Name      string
	Error     int
	Runtime   time.Duration // of the write direction
	WriteIOs  int64
	WriteIOPS float64
	Write     Latency // completion latency of the write(2) calls
	Sync      Latency // fsync/fdatasync latency: what etcd's WAL waits for
}

// Report is fio's JSON report.
type Report struct {
	Version string
	Jobs    []Job
}

// Job returns the job called name.
func (r Report) Job(name string) (Job, error) {
	for _, j := range r.Jobs {
		if j.Name == name {
			return j, nil
		}
	}
	return Job{}, fmt.Errorf("fio report has no job %q", name)
}

type rawLat struct {
	Min        int64              `json:"min"`
	Max        int64              `json:"max"`
	Mean       float64            `json:"mean"`
	N          int64              `json:"N"`
	Percentile map[string]float64 `json:"percentile"`
}

type rawReport struct {
	Version string `json:"fio version"`
	Jobs    []struct {
		Name  string `json:"jobname"`
		Error int    `json:"error"`
		Write struct {
			Runtime  int64   `json:"runtime"` // ms
			TotalIOs int64   `json:"total_ios"`
			IOPS     float64 `json:"iops"`
			Clat     rawLat  `json:"clat_ns"`
		} `json:"write"`
		Sync struct {
			Lat rawLat `json:"lat_ns"`
		} `json:"sync"`
	} `json:"jobs"`
}

// ParseJSON reads fio's JSON report. fio may print warnings before the JSON
// document ("fio: ..."); they are skipped.
func ParseJSON(r io.Reader) (Report, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return Report{}, fmt.Errorf("reading fio report: %w", err)
	}
	i := bytes.IndexByte(b, '{')
	if i < 0 {
		return Report{}, errors.New("fio report: no JSON document in output")
	}
	var raw rawReport
	if err := json.NewDecoder(bytes.NewReader(b[i:])).Decode(&raw); err != nil {
		return Report{}, fmt.Errorf("fio report: %w", err)
	}
	if len(raw.Jobs) == 0 {
		return Report{}, errors.New("fio report: no jobs")
	}
	rep := Report{Version: raw.Version}
	for _, j := range raw.Jobs {
		wl, err := convLat(j.Write.Clat)
		if err != nil {
			return Report{}, fmt.Errorf("fio report: job %s write clat: %w", j.Name, err)
		}
		sl, err := convLat(j.Sync.Lat)
		if err != nil {
			return Report{}, fmt.Errorf("fio report: job %s sync lat: %w", j.Name, err)
		}
		rep.Jobs = append(rep.Jobs, Job{
			Name:      j.Name,
			Error:     j.Error,
			Runtime:   time.Duration(j.Write.Runtime) * time.Millisecond,
			WriteIOs:  j.Write.TotalIOs,
			WriteIOPS: j.Write.IOPS,
			Write:     wl,
			Sync:      sl,
		})
	}
	return rep, nil
}

func convLat(r rawLat) (Latency, error) {
	l := Latency{
		N:           r.N,
		Min:         time.Duration(r.Min),
		Max:         time.Duration(r.Max),
		Mean:        time.Duration(r.Mean),
		Percentiles: map[float64]time.Duration{},
	}
	for k, v := range r.Percentile {
		p, err := strconv.ParseFloat(k, 64)
		if err != nil {
			return Latency{}, fmt.Errorf("percentile key %q: %w", k, err)
		}
		l.Percentiles[p] = time.Duration(v)
	}
	return l, nil
}

// Direction is fio's data direction in a log line.
type Direction int

// fio's enum fio_ddir.
const (
	DirRead  Direction = 0
	DirWrite Direction = 1
	DirTrim  Direction = 2
)

// Sample is one line of a per-I/O latency log.
type Sample struct {
	At  time.Duration // completion time since the job started (ms resolution)
	Lat time.Duration
	Dir Direction
	BS  int
}

// ParseLatLog reads a log written by --write_lat_log with log_avg_msec=0:
// "time_ms, value_ns, ddir, bs[, offset[, prio]]" per line.
func ParseLatLog(r io.Reader) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		f := strings.Split(s, ",")
		if len(f) < 4 {
			return nil, fmt.Errorf("fio latency log line %d: %d fields, want at least 4", line, len(f))
		}
		var v [4]int64
		for i := range v {
			n, err := strconv.ParseInt(strings.TrimSpace(f[i]), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("fio latency log line %d field %d: %w", line, i+1, err)
			}
			v[i] = n
		}
		out = append(out, Sample{
			At:  time.Duration(v[0]) * time.Millisecond,
			Lat: time.Duration(v[1]),
			Dir: Direction(v[2]),
			BS:  int(v[3]),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading fio latency log: %w", err)
	}
	return out, nil
}

// Stall is how long the WAL writer waited between two appends beyond its
// schedule, at time At.
type Stall struct {
	At  time.Duration
	Gap time.Duration
}

// SyncStalls derives a per-append timeline from the write log of a job run
// with fdatasync=1 at a fixed rate. fio logs no per-I/O sync latency (only the
// totals in the JSON report), so this uses what the log does give: after
// write i completes, fio calls fdatasync and then issues write i+1 at its
// scheduled time or at once if late. The gap between the completion of write i
// and the issue of write i+1 is therefore >= fdatasync_i, and equal to it when
// fdatasync_i ran past the schedule, which is what a stall plot needs.
// Gaps within one rate interval are an upper bound of a fast fdatasync; the
// millisecond timestamps of the log limit precision to about 1 ms.
func SyncStalls(samples []Sample) []Stall {
	var ws []Sample
	for _, s := range samples {
		if s.Dir == DirWrite {
			ws = append(ws, s)
		}
	}
	var out []Stall
	for i := 0; i+1 < len(ws); i++ {
		issueNext := ws[i+1].At - ws[i+1].Lat
		gap := issueNext - ws[i].At
		if gap < 0 {
			gap = 0
		}
		out = append(out, Stall{At: ws[i].At, Gap: gap})
	}
	return out
}

// WALJob describes the etcd-like WAL load: small sequential writes, each
// followed by fdatasync, as etcd's own disk check runs it.
type WALJob struct {
	Name     string
	Dir      string        // directory on the filesystem under test
	Runtime  time.Duration // time-based
	RateIOPS int           // 0: unlimited (fsync after fsync)
	LatLog   string        // prefix for --write_lat_log; "" for none
}

// Args is fio's argv (without the binary) for the job, JSON report on stdout.
func (j WALJob) Args() []string {
	a := []string{
		"--name=" + j.Name,
		"--directory=" + j.Dir,
		"--rw=write", "--ioengine=sync", "--fdatasync=1",
		"--bs=2300", "--size=22m",
		"--time_based", fmt.Sprintf("--runtime=%ds", int(j.Runtime.Seconds())),
		"--percentile_list=50:90:99:99.9:99.99",
		"--output-format=json",
	}
	if j.RateIOPS > 0 {
		a = append(a, fmt.Sprintf("--rate_iops=%d", j.RateIOPS))
	}
	if j.LatLog != "" {
		a = append(a, "--write_lat_log="+j.LatLog, "--log_avg_msec=0")
	}
	return a
}

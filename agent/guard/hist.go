package guard

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// etcd's disk latency histograms: the WAL fdatasync every proposal waits
// for, and the bbolt backend commit.
const (
	MetricWALFsync      = "etcd_disk_wal_fsync_duration_seconds"
	MetricBackendCommit = "etcd_disk_backend_commit_duration_seconds"
)

// Histogram is a cumulative Prometheus histogram: Counts[i] observations
// were <= Bounds[i] (seconds); the last bound is +Inf.
type Histogram struct {
	Bounds []float64
	Counts []uint64
}

// Total is the number of observations.
func (h Histogram) Total() uint64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Sub returns the observations made since old. A histogram that went
// backwards (etcd restarted) or changed buckets is returned whole.
func (h Histogram) Sub(old Histogram) Histogram {
	if len(old.Bounds) != len(h.Bounds) || old.Total() > h.Total() {
		return h
	}
	d := Histogram{Bounds: h.Bounds, Counts: make([]uint64, len(h.Counts))}
	for i := range h.Counts {
		if old.Bounds[i] != h.Bounds[i] || old.Counts[i] > h.Counts[i] {
			return h
		}
		d.Counts[i] = h.Counts[i] - old.Counts[i]
	}
	return d
}

// Quantile estimates the q-quantile by linear interpolation inside the
// bucket, as Prometheus' histogram_quantile does; a quantile in the +Inf
// bucket is reported as the largest finite bound. ok is false without
// observations.
func (h Histogram) Quantile(q float64) (time.Duration, bool) {
	n := h.Total()
	if n == 0 {
		return 0, false
	}
	rank := q * float64(n)
	i := sort.Search(len(h.Counts), func(i int) bool { return float64(h.Counts[i]) >= rank })
	if i >= len(h.Counts) {
		i = len(h.Counts) - 1
	}
	if math.IsInf(h.Bounds[i], 1) {
		if i == 0 {
			return 0, false
		}
		return secs(h.Bounds[i-1]), true
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.Bounds[i-1], h.Counts[i-1]
	}
	in := h.Counts[i] - below
	if in == 0 {
		return secs(h.Bounds[i]), true
	}
	return secs(lo + (h.Bounds[i]-lo)*(rank-float64(below))/float64(in)), true
}

// Above estimates how many observations were slower than t, counting the
// share of t's bucket above it as Quantile interpolates (evenly spread).
func (h Histogram) Above(t time.Duration) float64 {
	x := t.Seconds()
	n := h.Total()
	below := 0.0
	lo, cum := 0.0, uint64(0)
	for i, b := range h.Bounds {
		in := h.Counts[i] - cum
		switch {
		case math.IsInf(b, 1):
			// The overflow bucket is above every finite t past lo.
		case b <= x:
			below += float64(in)
		case lo < x:
			below += float64(in) * (x - lo) / (b - lo)
		}
		lo, cum = b, h.Counts[i]
	}
	return float64(n) - below
}

// TailQuantile is the quantile a window of n observations reports as its
// p99: 0.99 from 100 observations up, and below that the second slowest
// (at least the median). The guard's windows hold about 25 of etcd's
// fsyncs: their 0.99-quantile is the slowest one, which is above a p99
// learned over hundreds in one window of five by chance alone (1 -
// 0.99^25 = 22%): that paced staging on noise. The second slowest is, by
// chance, in one window of 40 (2.6%); a lone slow fsync is not congestion.
func TailQuantile(n uint64) float64 {
	if n == 0 {
		return 0.99
	}
	return min(0.99, max(0.5, 1-1/float64(n)))
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ParseHistograms reads the named histograms from a Prometheus text
// exposition, summing label sets.
func ParseHistograms(r io.Reader, names ...string) (map[string]Histogram, error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return parseHistograms(body, names)
}

// ParseHistogramBytes is ParseHistograms of a body read whole.
func ParseHistogramBytes(body []byte, names ...string) (map[string]Histogram, error) {
	return parseHistograms(body, names)
}

// parseHistograms is ParseHistograms of a body read whole. It looks only
// at the lines of the named families: etcd's /metrics has ~180 KB in
// hundreds of families, and parsing all of them into structures once a
// second was most of the guard's CPU. Other lines are skipped by a
// prefix check in place, before any allocation (a string per line was
// ~1,800 allocations a scrape), and without bufio.Scanner's call and
// copy per line.
func parseHistograms(body []byte, names []string) (map[string]Histogram, error) {
	accs := make([]histAcc, len(names))
	for line := range bytes.Lines(body) {
		line = bytes.TrimSuffix(line, []byte{'\n'})
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		for k, name := range names {
			if !hasPrefix(line, name) {
				continue
			}
			if err := accs[k].add(line[len(name):]); err != nil {
				return nil, fmt.Errorf("parsing metrics line %q: %w", line, err)
			}
			break
		}
	}
	out := map[string]Histogram{}
	for i, name := range names {
		a := accs[i]
		if !a.seen {
			continue
		}
		h := Histogram{Bounds: make([]float64, 0, len(a.byLE)+1), Counts: make([]uint64, 0, len(a.byLE)+1)}
		for le := range a.byLE {
			h.Bounds = append(h.Bounds, le)
		}
		sort.Float64s(h.Bounds)
		for _, le := range h.Bounds {
			h.Counts = append(h.Counts, a.byLE[le])
		}
		if len(h.Bounds) == 0 || !math.IsInf(h.Bounds[len(h.Bounds)-1], 1) {
			h.Bounds = append(h.Bounds, math.Inf(1))
			h.Counts = append(h.Counts, a.count)
		}
		out[name] = h
	}
	return out, nil
}

// histAcc sums a histogram's lines over its label sets.
type histAcc struct {
	byLE  map[float64]uint64
	count uint64
	seen  bool
}

// add adds a line of the family, after its name. Lines of _sum, and of
// another family whose name starts with this one's, are not its.
func (a *histAcc) add(after []byte) error {
	isBucket := hasPrefix(after, "_bucket{")
	if !isBucket && !hasPrefix(after, "_count{") && !hasPrefix(after, "_count ") {
		return nil
	}
	rest := string(after)
	if isBucket {
		le, v, err := bucketLine(rest[len("_bucket"):])
		if err != nil {
			return err
		}
		if a.byLE == nil {
			a.byLE = map[float64]uint64{}
		}
		a.byLE[le] += v
		a.seen = true
		return nil
	}
	_, val, _ := strings.Cut(strings.TrimPrefix(rest, "_count"), " ")
	if j := strings.LastIndexByte(rest, '}'); j >= 0 {
		val = strings.TrimSpace(rest[j+1:])
	}
	v, err := counterValue(val)
	if err != nil {
		return err
	}
	a.count += v
	a.seen = true
	return nil
}

// hasPrefix is bytes.HasPrefix against a string, without converting
// either (the comparison of a converted slice does not allocate).
func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// bucketLine parses `{...,le="0.001",...} 123 [timestamp]`.
func bucketLine(s string) (float64, uint64, error) {
	end := strings.LastIndexByte(s, '}')
	if end < 0 {
		return 0, 0, fmt.Errorf("no closing brace")
	}
	labels := s[1:end]
	i := strings.Index(labels, `le="`)
	if i < 0 {
		return 0, 0, fmt.Errorf("bucket without le label")
	}
	if i > 0 && labels[i-1] != ',' && labels[i-1] != ' ' {
		return 0, 0, fmt.Errorf("bucket without le label")
	}
	leStr, _, ok := strings.Cut(labels[i+len(`le="`):], `"`)
	if !ok {
		return 0, 0, fmt.Errorf("unterminated le label")
	}
	le, err := strconv.ParseFloat(leStr, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("le %q: %w", leStr, err)
	}
	v, err := counterValue(strings.TrimSpace(s[end+1:]))
	return le, v, err
}

// counterValue parses a sample value (an optional timestamp follows).
func counterValue(s string) (uint64, error) {
	f, _, _ := strings.Cut(strings.TrimSpace(s), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil || v < 0 || math.IsNaN(v) {
		return 0, fmt.Errorf("value %q: not a count", f)
	}
	return uint64(v), nil
}

func add(a, b Histogram) Histogram {
	if len(a.Bounds) == 0 {
		return b
	}
	if len(a.Bounds) != len(b.Bounds) {
		return a // differing buckets cannot be summed; keep the first
	}
	s := Histogram{Bounds: a.Bounds, Counts: make([]uint64, len(a.Counts))}
	for i := range a.Counts {
		s.Counts[i] = a.Counts[i] + b.Counts[i]
	}
	return s
}

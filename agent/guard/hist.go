package guard

import (
	"bufio"
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
// exposition, summing label sets. It looks only at the lines of those
// families: etcd's /metrics has ~180 KB in hundreds of families, and
// parsing all of them into structures once a second was most of the
// guard's CPU. Lines of other families are skipped by a prefix check on
// the scanner's bytes, before any allocation (a string per line was
// ~1,800 allocations a scrape).
func ParseHistograms(r io.Reader, names ...string) (map[string]Histogram, error) {
	return parseHistograms(r, nil, names)
}

// scanBuf is the scanner's first buffer: a few reads of etcd's /metrics,
// far above its longest line.
const scanBuf = 64 << 10

// parseHistograms is ParseHistograms scanning with buf (nil: a new one),
// so a caller that scrapes every second reuses it.
func parseHistograms(r io.Reader, buf []byte, names []string) (map[string]Histogram, error) {
	type acc struct {
		byLE  map[float64]uint64
		count uint64
		seen  bool
	}
	accs := make([]acc, len(names))
	if buf == nil {
		buf = make([]byte, 0, scanBuf)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(buf[:0], 1<<20)
	for sc.Scan() {
		b := sc.Bytes()
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		for i, name := range names {
			if !hasPrefix(b, name) {
				continue
			}
			rest := b[len(name):]
			isBucket := hasPrefix(rest, "_bucket{")
			if !isBucket && !hasPrefix(rest, "_count{") && !hasPrefix(rest, "_count ") {
				break // _sum, or a family whose name merely starts with ours
			}
			line := string(b)
			restS := line[len(name):]
			if isBucket {
				le, v, err := bucketLine(restS[len("_bucket"):])
				if err != nil {
					return nil, fmt.Errorf("parsing metrics line %q: %w", line, err)
				}
				if accs[i].byLE == nil {
					accs[i].byLE = map[float64]uint64{}
				}
				accs[i].byLE[le] += v
				accs[i].seen = true
				break
			}
			_, val, _ := strings.Cut(strings.TrimPrefix(restS, "_count"), " ")
			if j := strings.LastIndexByte(restS, '}'); j >= 0 {
				val = strings.TrimSpace(restS[j+1:])
			}
			v, err := counterValue(val)
			if err != nil {
				return nil, fmt.Errorf("parsing metrics line %q: %w", line, err)
			}
			accs[i].count += v
			accs[i].seen = true
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
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

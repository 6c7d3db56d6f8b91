// Package promhist reads one histogram from a Prometheus text exposition
// (etcd's /metrics) and computes quantiles the way Prometheus's
// histogram_quantile does, so scrapes taken before and after a scenario give
// that scenario's latency distribution.
package promhist

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Bucket is a cumulative bucket: Count observations were <= Le.
type Bucket struct {
	Le    float64
	Count float64
}

// Histogram is one (unlabelled or summed over labels) histogram.
type Histogram struct {
	Buckets []Bucket // sorted by Le, the last one +Inf
	Sum     float64
	Count   float64
}

// Parse reads the histogram called name from a text exposition, summing the
// series of all label sets (etcd exports one).
func Parse(r io.Reader, name string) (Histogram, error) {
	byLe := map[float64]float64{}
	var h Histogram
	seen := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		var suffix string
		switch {
		case strings.HasPrefix(rest, "_bucket"):
			suffix, rest = "bucket", rest[len("_bucket"):]
		case strings.HasPrefix(rest, "_sum"):
			suffix, rest = "sum", rest[len("_sum"):]
		case strings.HasPrefix(rest, "_count"):
			suffix, rest = "count", rest[len("_count"):]
		default:
			continue
		}
		labels, value, err := splitSample(rest)
		if err != nil {
			return Histogram{}, fmt.Errorf("metric %s: %q: %w", name, line, err)
		}
		seen = true
		switch suffix {
		case "sum":
			h.Sum += value
		case "count":
			h.Count += value
		case "bucket":
			le, ok := labelValue(labels, "le")
			if !ok {
				return Histogram{}, fmt.Errorf("metric %s: bucket without le: %q", name, line)
			}
			f, err := strconv.ParseFloat(le, 64)
			if err != nil {
				return Histogram{}, fmt.Errorf("metric %s: le %q: %w", name, le, err)
			}
			byLe[f] += value
		}
	}
	if err := sc.Err(); err != nil {
		return Histogram{}, fmt.Errorf("reading metrics: %w", err)
	}
	if !seen {
		return Histogram{}, fmt.Errorf("metrics have no histogram %s", name)
	}
	for le, c := range byLe {
		h.Buckets = append(h.Buckets, Bucket{le, c})
	}
	sort.Slice(h.Buckets, func(i, j int) bool { return h.Buckets[i].Le < h.Buckets[j].Le })
	if n := len(h.Buckets); n == 0 || !math.IsInf(h.Buckets[n-1].Le, 1) {
		return Histogram{}, fmt.Errorf("metric %s: no +Inf bucket", name)
	}
	return h, nil
}

// splitSample splits `{a="b",le="0.1"} 12` (or ` 12`) into labels and value.
func splitSample(s string) (string, float64, error) {
	var labels string
	if strings.HasPrefix(s, "{") {
		end := strings.LastIndexByte(s, '}')
		if end < 0 {
			return "", 0, errors.New("unterminated labels")
		}
		labels, s = s[1:end], s[end+1:]
	}
	f := strings.Fields(s)
	if len(f) == 0 {
		return "", 0, errors.New("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", 0, err
	}
	return labels, v, nil
}

func labelValue(labels, key string) (string, bool) {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == key {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}

// Sub returns h - before: the observations made between two scrapes.
func (h Histogram) Sub(before Histogram) (Histogram, error) {
	if len(before.Buckets) == 0 {
		return h, nil
	}
	if len(before.Buckets) != len(h.Buckets) {
		return Histogram{}, fmt.Errorf("bucket layouts differ (%d vs %d buckets)", len(h.Buckets), len(before.Buckets))
	}
	out := Histogram{Sum: h.Sum - before.Sum, Count: h.Count - before.Count}
	for i, b := range h.Buckets {
		if b.Le != before.Buckets[i].Le {
			return Histogram{}, fmt.Errorf("bucket %d: le %g vs %g", i, b.Le, before.Buckets[i].Le)
		}
		c := b.Count - before.Buckets[i].Count
		if c < 0 {
			return Histogram{}, errors.New("counter went backwards (process restarted between scrapes?)")
		}
		out.Buckets = append(out.Buckets, Bucket{b.Le, c})
	}
	return out, nil
}

// Total is the number of observations.
func (h Histogram) Total() float64 {
	if len(h.Buckets) == 0 {
		return 0
	}
	return h.Buckets[len(h.Buckets)-1].Count
}

// Quantile estimates the q-quantile (0..1) like histogram_quantile: linear
// interpolation inside the bucket that holds it, the lower bound of the
// first bucket taken as 0. If it falls in the +Inf bucket, the largest finite
// bound is returned. NaN when there are no observations.
func (h Histogram) Quantile(q float64) float64 {
	n := h.Total()
	if n == 0 || q < 0 || q > 1 {
		return math.NaN()
	}
	rank := q * n
	prevLe, prevCount := 0.0, 0.0
	for i, b := range h.Buckets {
		if b.Count >= rank {
			if math.IsInf(b.Le, 1) {
				if i == 0 {
					return math.NaN()
				}
				return h.Buckets[i-1].Le
			}
			if b.Count == prevCount {
				return b.Le
			}
			return prevLe + (b.Le-prevLe)*(rank-prevCount)/(b.Count-prevCount)
		}
		prevLe, prevCount = b.Le, b.Count
	}
	return math.NaN()
}

// MaxBound is an upper bound of the largest observation: the upper bound of
// the highest non-empty bucket (+Inf if it is the +Inf bucket). 0 when empty.
func (h Histogram) MaxBound() float64 {
	prev := 0.0
	bound := 0.0
	for _, b := range h.Buckets {
		if b.Count > prev {
			bound = b.Le
		}
		prev = b.Count
	}
	return bound
}

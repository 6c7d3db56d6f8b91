package guard

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ParseHistograms reads the named histograms from a Prometheus text
// exposition, summing label sets.
func ParseHistograms(r io.Reader, names ...string) (map[string]Histogram, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	out := map[string]Histogram{}
	for _, name := range names {
		f, ok := fams[name]
		if !ok || f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		var h Histogram
		for _, m := range f.GetMetric() {
			h = add(h, fromDTO(m.GetHistogram()))
		}
		out[name] = h
	}
	return out, nil
}

func fromDTO(d *dto.Histogram) Histogram {
	var h Histogram
	for _, b := range d.GetBucket() {
		h.Bounds = append(h.Bounds, b.GetUpperBound())
		h.Counts = append(h.Counts, b.GetCumulativeCount())
	}
	if len(h.Bounds) == 0 || !math.IsInf(h.Bounds[len(h.Bounds)-1], 1) {
		h.Bounds = append(h.Bounds, math.Inf(1))
		h.Counts = append(h.Counts, d.GetSampleCount())
	}
	return h
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

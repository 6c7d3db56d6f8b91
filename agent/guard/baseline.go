package guard

import (
	"math"
	"sort"
	"time"
)

// Normal is learned while no staging runs, so that a staging window is
// judged against the disk as it was before the agent touched anything
// (learned after the setup, the committed demo's freeze limit for
// backend_commit was 829 ms). Rolling is that record: etcd's latency
// histograms and its I/O stall share, decayed with a half-life so it
// follows the disk over hours without forgetting it between scrapes.

// Guidance is etcd's own guidance for a healthy disk (the etcd docs'
// hardware and tuning pages: WAL fsync p99 under 10 ms, backend commit
// p99 under 25 ms).
var Guidance = map[string]time.Duration{
	SignalWALFsync:      10 * time.Millisecond,
	SignalBackendCommit: 25 * time.Millisecond,
}

// SickFactor is how far above etcd's guidance a learned p99 may be and
// still count as this disk's normal: 10x puts the WAL fsync ceiling at
// 100 ms, etcd's default heartbeat interval. A member whose fsyncs take
// longer than a heartbeat already misses heartbeats: that disk is sick,
// and staging must not be allowed to make it sicker by learning it as
// normal. Between the guidance and the ceiling a disk is slow but working,
// and its own normal is what staging must keep: capping there (at 2x the
// guidance, the earlier rule) made the TCG guest's ordinary WAL fsync p99
// of 29-56 ms look like congestion all the time (demo: the write rate
// pinned at its 1 MB/s floor, 282 freezes, staging 880 s).
const SickFactor = 10.0

// Clamp caps each signal's p99 at SickFactor x etcd's guidance (and its
// median at the capped p99). It returns the signals it capped, and those
// it kept although they are above the guidance (slow), for the log.
func Clamp(b Baseline) (out Baseline, clamped, slow []string) {
	out = Baseline{}
	for _, k := range sortedKeys(b) {
		st := b[k]
		if g, ok := Guidance[SignalName(k)]; ok {
			if lim := time.Duration(SickFactor * float64(g)); st.P99 > lim {
				st.P99 = lim
				clamped = append(clamped, k)
			} else if st.P99 > g {
				slow = append(slow, k)
			}
			st.Median = min(st.Median, st.P99)
		}
		out[k] = st
	}
	return out, clamped, slow
}

// DecayedHist is a histogram whose counts decay: Counts[i] (per bucket,
// not cumulative) were observed <= Bounds[i] seconds; the last count is
// above the last bound. Finite bounds only, so it encodes as JSON.
type DecayedHist struct {
	Bounds []float64 `json:"bounds"`
	Counts []float64 `json:"counts"`
}

// Rolling is the rolling baseline kept while no staging runs.
type Rolling struct {
	Updated time.Time              `json:"updated"`
	Signals map[string]DecayedHist `json:"signals,omitempty"`
	// Stall is etcd's decayed mean I/O stall share; StallWeight the
	// decayed time it was measured over (seconds), 0 when never.
	Stall       float64 `json:"stall_share"`
	StallWeight float64 `json:"stall_weight"`
}

// Age is how old the record is at now.
func (r Rolling) Age(now time.Time) time.Duration {
	if r.Updated.IsZero() {
		return time.Duration(math.MaxInt64)
	}
	return now.Sub(r.Updated)
}

// Add folds in what happened over dt up to at: each signal's histogram
// delta and etcd's stall share (-1: not measured). Older observations
// decay by half every halfLife.
func (r Rolling) Add(at time.Time, dt time.Duration, deltas map[string]Histogram, stall float64, halfLife time.Duration) Rolling {
	w := 1.0
	if !r.Updated.IsZero() && halfLife > 0 {
		w = math.Pow(0.5, float64(at.Sub(r.Updated))/float64(halfLife))
	}
	out := Rolling{Updated: at, Signals: map[string]DecayedHist{}, Stall: r.Stall, StallWeight: r.StallWeight * w}
	for k, h := range r.Signals {
		d := DecayedHist{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts))}
		for i, c := range h.Counts {
			d.Counts[i] = c * w
		}
		out.Signals[k] = d
	}
	for name, h := range deltas {
		k := SignalName(name)
		fin, per := perBucket(h)
		old, ok := out.Signals[k]
		if !ok || !equalBounds(old.Bounds, fin) {
			old = DecayedHist{Bounds: fin, Counts: make([]float64, len(per))}
		}
		for i, c := range per {
			old.Counts[i] += c
		}
		out.Signals[k] = old
	}
	if stall >= 0 && dt > 0 {
		s := dt.Seconds()
		out.Stall = (out.Stall*out.StallWeight + stall*s) / (out.StallWeight + s)
		out.StallWeight += s
	}
	return out
}

// Baseline is each signal with at least minN (decayed) observations, and
// the stall share (-1 when never measured).
func (r Rolling) Baseline(minN uint64) (Baseline, float64) {
	b := Baseline{}
	for k, h := range r.Signals {
		n := 0.0
		for _, c := range h.Counts {
			n += c
		}
		if n < float64(max(minN, 1)) {
			continue
		}
		b[k] = Stat{P99: h.quantile(0.99, n), Median: h.quantile(0.5, n), N: uint64(n)}
	}
	stall := -1.0
	if r.StallWeight > 0 {
		stall = r.Stall
	}
	return b, stall
}

// quantile interpolates inside the bucket as Histogram.Quantile does; the
// overflow bucket reports the largest bound.
func (h DecayedHist) quantile(q, n float64) time.Duration {
	rank := q * n
	cum := 0.0
	for i, c := range h.Counts {
		if cum+c < rank || c == 0 {
			cum += c
			continue
		}
		if i >= len(h.Bounds) {
			break
		}
		lo := 0.0
		if i > 0 {
			lo = h.Bounds[i-1]
		}
		return secs(lo + (h.Bounds[i]-lo)*(rank-cum)/c)
	}
	if len(h.Bounds) == 0 {
		return 0
	}
	return secs(h.Bounds[len(h.Bounds)-1])
}

// perBucket turns a cumulative histogram into finite bounds and
// per-bucket counts (one more than bounds: the overflow).
func perBucket(h Histogram) ([]float64, []float64) {
	var fin []float64
	for _, b := range h.Bounds {
		if !math.IsInf(b, 1) {
			fin = append(fin, b)
		}
	}
	sort.Float64s(fin)
	per := make([]float64, len(fin)+1)
	prev := uint64(0)
	for i, c := range h.Counts {
		if c < prev {
			c = prev
		}
		idx := i
		if i < len(h.Bounds) && math.IsInf(h.Bounds[i], 1) {
			idx = len(fin)
		}
		if idx < len(per) {
			per[idx] += float64(c - prev)
		}
		prev = c
	}
	return fin, per
}

func equalBounds(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

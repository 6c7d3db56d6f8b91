package guard

import (
	"math"
	"testing"
	"time"
)

func TestStepRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	base := Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 4 * time.Millisecond, N: 100}}
	wal := func(s float64, p99 time.Duration) Sample {
		return Sample{At: at(s), Latency: map[string]Stat{SignalWALFsync: {P99: p99, Median: p99 / 2, N: 20}}, Stall: -1}
	}
	// The mechanics below the default floor, probing every second.
	cfg := RateConfig{Min: 1_000_000, ProbeEvery: time.Second}
	steady := RateState{Started: true, Rate: 10_000_000, LastRaise: at(0), LastCut: at(-60), CutFrom: 12_000_000}
	cases := []struct {
		name    string
		st      RateState
		in      RateInput
		rate    uint64
		reason  string
		changed bool
	}{
		{"first step starts at Start and holds until ProbeEvery",
			RateState{}, RateInput{Sample: wal(0, 5*time.Millisecond)}, 4_000_000, "calm", false},
		{"slow start doubles while calm",
			RateState{Started: true, SlowStart: true, Rate: 4_000_000, LastRaise: at(0)}, RateInput{Sample: wal(1, 5*time.Millisecond)}, 8_000_000, "calm: probing up (slow start)", true},
		{"slow start doubles no further than twice what the disks wrote",
			RateState{Started: true, SlowStart: true, Rate: 4_000_000, LastRaise: at(0)}, RateInput{Sample: wal(1, 5*time.Millisecond), Written: 3_000_000}, 6_000_000, "calm: probing up (slow start)", true},
		{"over target (1.3 x 10ms) cuts by half and ends slow start",
			RateState{Started: true, SlowStart: true, Rate: 8_000_000, LastRaise: at(0)}, RateInput{Sample: wal(1, 14*time.Millisecond)}, 4_000_000, "etcd over target: cutting", true},
		{"at target is not congestion",
			steady, RateInput{Sample: wal(1, 13*time.Millisecond)}, 10_250_000, "calm: probing up", true},
		{"a second cut waits for the first to show",
			RateState{Started: true, Rate: 4_000_000, LastCut: at(0), LastRaise: at(0)}, RateInput{Sample: wal(1, 50*time.Millisecond)}, 4_000_000, "congested, but the last cut has not shown yet", false},
		{"after the cooldown it cuts again, not below Min",
			RateState{Started: true, Rate: 1_500_000, LastCut: at(0), LastRaise: at(0)}, RateInput{Sample: wal(3, 50*time.Millisecond)}, 1_000_000, "etcd over target: cutting", true},
		{"calm after a cut waits out the cooldown",
			RateState{Started: true, Rate: 4_000_000, LastCut: at(0), LastRaise: at(0)}, RateInput{Sample: wal(1, 5*time.Millisecond)}, 4_000_000, "calm, waiting out the last cut", false},
		{"near the last cut's rate it probes by Step (250 kB/s)",
			steady, RateInput{Sample: wal(1, 5*time.Millisecond), Written: 10_000_000}, 10_250_000, "calm: probing up", true},
		{"or by 2% when that is more",
			RateState{Started: true, Rate: 20_000_000, LastRaise: at(0), LastCut: at(-60), CutFrom: 22_000_000}, RateInput{Sample: wal(1, 5*time.Millisecond)}, 20_400_000, "calm: probing up", true},
		{"well below the last cut's rate it probes by an eighth",
			RateState{Started: true, Rate: 4_000_000, LastRaise: at(0), LastCut: at(-60), CutFrom: 12_000_000}, RateInput{Sample: wal(1, 5*time.Millisecond)}, 4_500_000, "calm: probing up", true},
		{"a cap the disks fell behind is not raised",
			steady, RateInput{Sample: wal(1, 5*time.Millisecond), Written: 8_000_000}, 10_000_000, "calm, but the cap does not bind: holding", false},
		{"a deep device queue holds the rate",
			steady, RateInput{Sample: Sample{At: at(1), Stall: -1, QueueDepth: 20, Latency: map[string]Stat{SignalWALFsync: {P99: 5 * time.Millisecond, N: 20}}}}, 10_000_000, "calm, but the device queue is 20.0 deep: holding", false},
		{"nothing observed: hold",
			steady, RateInput{Sample: Sample{At: at(1), Stall: -1}}, 10_000_000, "no signal in the window: holding", false},
		{"etcd too slow to serve its metrics is a cut, whatever the device queue says",
			steady, RateInput{Sample: Sample{At: at(1), Stall: -1, MetricsTimeout: true, QueueDepth: 1, Kernel: map[string]Stat{"disk_await/vdb": {P99: 4 * time.Millisecond, N: 50}}}}, 5_000_000, "etcd did not answer its metrics in time: cutting", true},
		{"etcd silent: disk await does not decide (it counts the stager's own requests), the queue does, and no probing",
			RateState{Started: true, Rate: 10_000_000, LastRaise: at(0)},
			RateInput{Sample: Sample{At: at(1), Stall: -1, QueueDepth: 3, Kernel: map[string]Stat{"disk_await/vdb": {P99: 400 * time.Millisecond, N: 50}}}}, 10_000_000, "etcd silent in the window: holding", false},
		{"etcd silent and a queue deeper than 8: cut",
			RateState{Started: true, Rate: 10_000_000, LastRaise: at(0)},
			RateInput{Sample: Sample{At: at(1), Stall: -1, QueueDepth: 20, Kernel: map[string]Stat{"disk_await/vdb": {P99: 4 * time.Millisecond, N: 50}}}}, 5_000_000, "device queue too deep: cutting", true},
		{"etcd's stall share over its learned share + 0.1 cuts",
			steady, RateInput{Sample: Sample{At: at(1), Stall: 0.35}, StallBase: 0.2}, 5_000_000, "etcd over target: cutting", true},
		{"stall share within its learned share + 0.1 is calm",
			steady, RateInput{Sample: Sample{At: at(1), Stall: 0.25, Latency: wal(1, 5*time.Millisecond).Latency}, StallBase: 0.2}, 10_250_000, "calm: probing up", true},
		{"a calm stall share with etcd silent (no fsync finished: maybe stalled) holds",
			steady, RateInput{Sample: Sample{At: at(1), Stall: 0.25, Latency: map[string]Stat{SignalWALFsync: {}}}, StallBase: 0.2}, 10_000_000, "etcd silent in the window: holding", false},
		{"never above Max",
			RateState{Started: true, SlowStart: true, Rate: 800_000_000, LastRaise: at(0)}, RateInput{Sample: wal(1, 5*time.Millisecond)}, 1_000_000_000, "calm: probing up (slow start)", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, d := StepRate(cfg, base, c.st, c.in)
			if d.Rate != c.rate || st.Rate != c.rate || d.Reason != c.reason || d.Changed != c.changed {
				t.Errorf("got rate %d (state %d) %q changed=%v, want %d %q changed=%v", d.Rate, st.Rate, d.Reason, d.Changed, c.rate, c.reason, c.changed)
			}
		})
	}
}

func TestRateConfigValidate(t *testing.T) {
	for _, c := range []RateConfig{{Min: 5, Max: 4}, {Backoff: 1}, {Target: 1}, {Headroom: 0.5}} {
		if c.Validate() == nil {
			t.Errorf("%+v: want an error", c)
		}
	}
	if err := (RateConfig{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// By default a raise waits for a whole long window after the last one, so
// that what the last raise let through is judged by a window of its own.
func TestStepRateProbesOncePerLongWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	base := Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 4 * time.Millisecond, N: 100}}
	st := RateState{Started: true, Rate: 10_000_000, LastRaise: t0, LastCut: t0.Add(-time.Minute), CutFrom: 12_000_000}
	calm := func(after time.Duration) RateInput {
		return RateInput{Sample: Sample{At: t0.Add(after), Latency: map[string]Stat{SignalWALFsync: {P99: 5 * time.Millisecond, Median: 3 * time.Millisecond, N: 20}}, Stall: -1}}
	}
	for _, c := range []struct {
		after  time.Duration
		reason string
	}{
		{time.Second, "calm"},
		{RateWindow - time.Millisecond, "calm"},
		{RateWindow, "calm: probing up"},
	} {
		if _, d := StepRate(RateConfig{}, base, st, calm(c.after)); d.Reason != c.reason {
			t.Errorf("%v after the last raise: %q, want %q", c.after, d.Reason, c.reason)
		}
	}
}

// Over the long window etcd's congestion is a count: how many of its
// observations beat the target (1.3 x the learned p99), against the share
// the promise allows plus chance. The slowest one alone decides nothing.
func TestStepRateCountsOverTheLongWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	base := Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 4 * time.Millisecond, N: 100}}
	steady := RateState{Started: true, Rate: 10_000_000, LastRaise: t0, LastCut: t0.Add(-time.Minute), CutFrom: 12_000_000}
	// 125 fsyncs over 5 s (etcd's buckets: ..., 8, 16, 32 ms, ...): fast
	// ones at 4-8 ms, slow ones at 16-32 ms (all above the 13 ms target).
	long := func(slow uint64) Sample {
		h := Histogram{Bounds: []float64{0.004, 0.008, 0.016, 0.032, math.Inf(1)}}
		h.Counts = []uint64{0, 125 - slow, 125 - slow, 125, 125}
		return Sample{Hists: map[string]Histogram{SignalWALFsync: h}}
	}
	// The short window's second slowest is over target in both cases; a
	// whole long window has passed since the last raise.
	short := Sample{At: t0.Add(RateWindow), Latency: map[string]Stat{SignalWALFsync: {P99: 20 * time.Millisecond, Median: 5 * time.Millisecond, N: 25}}, Stall: -1}
	for _, c := range []struct {
		slow   uint64
		reason string
	}{
		{0, "calm: probing up"},
		{1, "calm: probing up"}, // 0.8%: within the promise's 1% of 125
		// Over the promise, within chance (1.25 + 2 x 1.1 + 1 = 4.5): the
		// dead band holds the rate.
		{2, "within chance of the target, not within the promise: holding"},
		{4, "within chance of the target, not within the promise: holding"}, // 3.2%
		{5, "etcd over target: cutting"},                                    // 4%: beyond chance
		{30, "etcd over target: cutting"},                                   // a queue building up
	} {
		_, d := StepRate(RateConfig{}, base, steady, RateInput{Sample: short, Long: long(c.slow)})
		if d.Reason != c.reason {
			t.Errorf("%d of 125 slow: %q (over %.2f, allowed %.2f), want %q", c.slow, d.Reason, d.Over, d.OverLimit, c.reason)
		}
	}
	// A second in which no fsync finished is judged by the long window
	// when that has observations, and held when it has none.
	empty := Sample{At: short.At, Latency: map[string]Stat{SignalWALFsync: {}}, Stall: -1}
	if _, d := StepRate(RateConfig{}, base, steady, RateInput{Sample: empty, Long: long(0)}); d.Reason != "calm: probing up" {
		t.Errorf("empty second, calm long window: %q, want a probe", d.Reason)
	}
	if _, d := StepRate(RateConfig{}, base, steady, RateInput{Sample: empty, Long: long(30)}); d.Reason != "etcd over target: cutting" {
		t.Errorf("empty second, long window over target: %q, want a cut", d.Reason)
	}
	none := long(0)
	none.Hists[SignalWALFsync] = Histogram{Bounds: none.Hists[SignalWALFsync].Bounds, Counts: make([]uint64, 5)}
	if _, d := StepRate(RateConfig{}, base, steady, RateInput{Sample: Sample{At: short.At, Latency: empty.Latency, Stall: 0.05}, Long: none}); d.Reason != "etcd silent in the window: holding" {
		t.Errorf("no fsync in either window, calm stall share: %q, want a hold", d.Reason)
	}
}

// TestStepRateHoldsWhenTheLongWindowCannotTell: with a long window that
// has no histogram of the signal (its base reading failed to scrape), a
// slow second is not judged on its own: the controller holds.
func TestStepRateHoldsWhenTheLongWindowCannotTell(t *testing.T) {
	t0 := time.Unix(1000, 0)
	base := Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 4 * time.Millisecond, N: 100}}
	steady := RateState{Started: true, Rate: 10_000_000, LastRaise: t0, LastCut: t0.Add(-time.Minute), CutFrom: 12_000_000}
	short := Sample{At: t0.Add(time.Second), Latency: map[string]Stat{SignalWALFsync: {P99: 40 * time.Millisecond, Median: 5 * time.Millisecond, N: 25}}, Stall: -1}
	st, d := StepRate(RateConfig{}, base, steady, RateInput{Sample: short, Long: Sample{At: short.At, Hists: map[string]Histogram{}}})
	if d.Reason != "no signal in the window: holding" || st.Rate != steady.Rate {
		t.Errorf("%q at %d, want a hold at %d", d.Reason, st.Rate, steady.Rate)
	}
	// Without a long window at all (table tests, a caller without one) the
	// second decides, as before.
	if _, d := StepRate(RateConfig{}, base, steady, RateInput{Sample: short}); d.Reason != "etcd over target: cutting" {
		t.Errorf("no long window: %q, want a cut", d.Reason)
	}
}

func TestHistogramAbove(t *testing.T) {
	h := Histogram{Bounds: []float64{0.001, 0.002, 0.004, math.Inf(1)}, Counts: []uint64{10, 30, 40, 42}}
	for _, c := range []struct {
		t    time.Duration
		want float64
	}{
		{0, 42},
		{time.Millisecond, 32},
		{1500 * time.Microsecond, 22}, // half of the 1-2 ms bucket's 20
		{4 * time.Millisecond, 2},     // the overflow
		{time.Second, 2},
	} {
		if got := h.Above(c.t); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Above(%v) = %g, want %g", c.t, got, c.want)
		}
	}
}

// The floor is relative to what the disks wrote (a quarter of the peak),
// not an absolute 4 MB/s: on a disk that cannot take 4 MB/s of small
// writes the loop paces below it; on the 20 MB/s disk the floor stays
// about 4-5 MB/s (cuts below it did not help there, see RateConfig.Min);
// before anything is measured the floor is the start.
func TestStepRateFloorIsRelativeToTheDisk(t *testing.T) {
	t0 := time.Unix(1000, 0)
	base := Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 4 * time.Millisecond, N: 100}}
	slow := func(written float64) RateInput {
		return RateInput{Written: written, Sample: Sample{At: t0.Add(10 * time.Second),
			Latency: map[string]Stat{SignalWALFsync: {P99: 50 * time.Millisecond, N: 20}}, Stall: -1}}
	}
	for _, c := range []struct {
		name       string
		cfg        RateConfig
		peak       float64 // written before this step
		written    float64
		from, want uint64
	}{
		{"nothing measured: the start is the floor", RateConfig{}, 0, 0, 6_000_000, 4_000_000},
		{"nothing measured, at the start: held", RateConfig{}, 0, 0, 4_000_000, 4_000_000},
		{"the 20 MB/s disk: a quarter of what it wrote", RateConfig{}, 18_000_000, 3_000_000, 8_000_000, 4_500_000},
		{"a disk that takes 2 MB/s: cut below 4 MB/s", RateConfig{}, 2_000_000, 1_500_000, 4_000_000, 2_000_000},
		{"a disk that takes 2 MB/s, again: down to 500 kB/s", RateConfig{}, 2_000_000, 500_000, 1_000_000, 500_000},
		{"the peak is what this step wrote when higher", RateConfig{}, 0, 2_000_000, 4_000_000, 2_000_000},
		{"a fast disk's floor is above the start", RateConfig{}, 100_000_000, 40_000_000, 40_000_000, 25_000_000},
		{"an absolute floor bounds it", RateConfig{Min: 3_000_000}, 2_000_000, 1_500_000, 4_000_000, 3_000_000},
		{"negative share: the start is the floor, as before", RateConfig{MinShare: -1}, 2_000_000, 1_500_000, 6_000_000, 4_000_000},
		{"a configured start is the unmeasured floor", RateConfig{Start: 10_000_000}, 0, 0, 12_000_000, 10_000_000},
		{"a configured Min is the unmeasured floor", RateConfig{Min: 1_000_000}, 0, 0, 4_000_000, 2_000_000},
		{"never below one request a second", RateConfig{}, 100_000, 100_000, 100_000, 65_536},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, d := StepRate(c.cfg, base, RateState{Started: true, Rate: c.from, LastRaise: t0, PeakWritten: c.peak}, slow(c.written))
			if st.Rate != c.want || st.LastCut.IsZero() {
				t.Errorf("from %d: rate %d (%s), want a cut to %d", c.from, st.Rate, d.Reason, c.want)
			}
		})
	}
}

// The IOPS cap follows the rate at 16 KiB a request by default.
func TestRateIOPS(t *testing.T) {
	for _, c := range []struct {
		cfg  RateConfig
		rate uint64
		want uint64
	}{
		{RateConfig{}, 4_000_000, 244},
		{RateConfig{}, 1_000, 1},
		{RateConfig{IOSize: 4096}, 4_096_000, 1000},
		{RateConfig{IOSize: -1}, 4_000_000, 0},
	} {
		if got := c.cfg.IOPS(c.rate); got != c.want {
			t.Errorf("%+v: IOPS(%d) = %d, want %d", c.cfg, c.rate, got, c.want)
		}
	}
}

// etcd's CPU wait is logged beside a rate decision and decides nothing: a
// window over target cuts the same with etcd waiting for a CPU or not.
func TestRateDecisionLogsEtcdCPUWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	steady := RateState{Started: true, Rate: 10_000_000, LastRaise: t0, LastCut: t0.Add(-time.Minute), CutFrom: 10_000_000}
	base := Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 5 * time.Millisecond, N: 100}}
	attr := func(d RateDecision) (any, bool) {
		a := d.LogAttrs()
		for i := 0; i+1 < len(a); i += 2 {
			if a[i] == "etcd_cpu_wait_share" {
				return a[i+1], true
			}
		}
		return nil, false
	}
	for _, over := range []bool{false, true} {
		p99 := 5 * time.Millisecond
		if over {
			p99 = 50 * time.Millisecond
		}
		sample := func(cpuWait float64) Sample {
			return Sample{At: t0.Add(time.Second), Latency: map[string]Stat{SignalWALFsync: {P99: p99, Median: p99 / 2, N: 20}}, Stall: -1, CPUWait: cpuWait}
		}
		waiting, notRead := sample(0.4816), sample(-1)
		stW, dW := StepRate(RateConfig{}, base, steady, RateInput{Sample: waiting})
		stN, dN := StepRate(RateConfig{}, base, steady, RateInput{Sample: notRead})
		if stW.Rate != stN.Rate || dW.Reason != dN.Reason {
			t.Errorf("over target %v: with the CPU wait %d %q, without %d %q", over, stW.Rate, dW.Reason, stN.Rate, dN.Reason)
		}
		if v, ok := attr(dW); !ok || v != 0.482 {
			t.Errorf("over target %v: etcd_cpu_wait_share = %v (%v), want 0.482", over, v, ok)
		}
		if v, ok := attr(dN); ok {
			t.Errorf("over target %v: etcd_cpu_wait_share = %v logged when not read", over, v)
		}
	}
}

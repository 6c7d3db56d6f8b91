package guard

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

const msec = time.Millisecond

// wal is a sample with etcd's WAL fsync p99/median (ms) and n observations.
func wal(atMS int, p99, med float64, n uint64) Sample {
	return Sample{
		At:      t0.Add(time.Duration(atMS) * msec),
		Latency: map[string]Stat{"wal_fsync": {P99: time.Duration(p99 * float64(msec)), Median: time.Duration(med * float64(msec)), N: n}},
		Stall:   -1,
		CPUWait: -1,
	}
}

// awaitStall is a sample with only a disk await (ms) and a PSI stall share.
func awaitStall(atMS int, awaitMS float64, stall float64) Sample {
	aw := time.Duration(awaitMS * float64(msec))
	return Sample{
		At:     t0.Add(time.Duration(atMS) * msec),
		Kernel: map[string]Stat{"disk_await/vdb": {P99: aw, Median: aw, N: 50}},
		Stall:  stall,
	}
}

// step is one sample and the decision expected for it.
type step struct {
	s      Sample
	action Action
	reason string // substring
	forced bool
}

func TestController(t *testing.T) {
	base := Baseline{"wal_fsync": {P99: 10 * msec, Median: 3 * msec, N: 500}}
	// Defaults: freeze above 20ms p99, thaw at median <= 4.5ms, freezes of
	// 0.2-2s, run share 0.2 (run 0.25s after a 1s freeze).
	tests := []struct {
		name  string
		cfg   Config
		base  Baseline
		steps []step
		stats Stats
	}{
		{
			name: "normal latency never freezes",
			steps: []step{
				{wal(0, 12, 3, 100), Hold, "within limit", false},
				{wal(1000, 19.9, 4, 100), Hold, "within limit", false},
			},
		},
		{
			name: "spike freezes, median back thaws after the shortest freeze",
			steps: []step{
				{wal(0, 12, 3, 100), Hold, "within limit", false},
				{wal(1000, 45, 8, 100), Freeze, "p99 above limit", false},
				{wal(1100, 30, 3, 10), Hold, "shortest freeze", false},
				{wal(1300, 30, 3, 20), Thaw, "median back", false},
			},
			stats: Stats{Freezes: 1, Frozen: 300 * msec},
		},
		{
			name: "one slow fsync in the window does not hold the freeze (median decides)",
			steps: []step{
				{wal(0, 50, 9, 100), Freeze, "p99", false},
				{wal(500, 80, 4, 40), Thaw, "median back", false},
			},
			stats: Stats{Freezes: 1, Frozen: 500 * msec},
		},
		{
			name: "high median holds until the cap, then a forced thaw and the run share floor",
			steps: []step{
				{wal(0, 50, 9, 100), Freeze, "p99", false},
				{wal(1000, 60, 12, 50), Hold, "still above thaw level", false},
				{wal(2000, 60, 12, 50), Thaw, "cap", true},
				// 2s frozen: must run 0.5s before the next freeze.
				{wal(2300, 60, 12, 50), Hold, "must run 500ms after a 2s freeze", false},
				{wal(2500, 60, 12, 50), Freeze, "p99", false},
			},
			stats: Stats{Freezes: 2, ForcedThaws: 1, Frozen: 2 * time.Second},
		},
		{
			name: "no fsync completed while frozen: stay frozen (it may be stuck) until the cap",
			steps: []step{
				{wal(0, 50, 9, 100), Freeze, "p99", false},
				{wal(1000, 0, 0, 0), Hold, "no latency observed", false},
				{wal(2000, 0, 0, 0), Thaw, "cap", true},
			},
			stats: Stats{Freezes: 1, ForcedThaws: 1, Frozen: 2 * time.Second},
		},
		{
			name: "etcd silent: disk await decides",
			base: Baseline{"wal_fsync": {P99: 10 * msec, Median: 3 * msec}, "disk_await/vdb": {P99: 4 * msec, Median: 4 * msec}},
			steps: []step{
				{Sample{At: t0, Latency: map[string]Stat{"wal_fsync": {}}, Kernel: map[string]Stat{"disk_await/vdb": {P99: 30 * msec, Median: 30 * msec, N: 200}}, Stall: -1}, Freeze, "p99", false},
				{Sample{At: t0.Add(400 * msec), Kernel: map[string]Stat{"disk_await/vdb": {P99: 5 * msec, Median: 5 * msec, N: 50}}, Stall: -1}, Thaw, "median back", false},
			},
			stats: Stats{Freezes: 1, Frozen: 400 * msec},
		},
		{
			name: "etcd observed: disk await is ignored",
			base: Baseline{"wal_fsync": {P99: 10 * msec, Median: 3 * msec}, "disk_await/vdb": {P99: 4 * msec, Median: 4 * msec}},
			steps: []step{
				{Sample{At: t0, Latency: map[string]Stat{"wal_fsync": {P99: 12 * msec, Median: 3 * msec, N: 80}}, Kernel: map[string]Stat{"disk_await/vdb": {P99: 90 * msec, Median: 90 * msec, N: 200}}, Stall: -1}, Hold, "within limit", false},
			},
		},
		{
			name: "worst of wal_fsync and backend_commit",
			base: Baseline{"wal_fsync": {P99: 10 * msec, Median: 3 * msec}, "backend_commit": {P99: 20 * msec, Median: 8 * msec}},
			steps: []step{
				{Sample{At: t0, Latency: map[string]Stat{"wal_fsync": {P99: 15 * msec, Median: 3 * msec, N: 80}, "backend_commit": {P99: 50 * msec, Median: 9 * msec, N: 10}}, Stall: -1}, Freeze, "p99", false},
				// wal median fine, commit median 15ms > 12ms: not calm yet.
				{Sample{At: t0.Add(500 * msec), Latency: map[string]Stat{"wal_fsync": {P99: 5 * msec, Median: 3 * msec, N: 80}, "backend_commit": {P99: 20 * msec, Median: 15 * msec, N: 10}}, Stall: -1}, Hold, "still above thaw level", false},
				{Sample{At: t0.Add(900 * msec), Latency: map[string]Stat{"wal_fsync": {P99: 5 * msec, Median: 3 * msec, N: 80}, "backend_commit": {P99: 20 * msec, Median: 10 * msec, N: 10}}, Stall: -1}, Thaw, "median back", false},
			},
			stats: Stats{Freezes: 1, Frozen: 900 * msec},
		},
		{
			name: "baseline floors: a 0.5ms baseline still allows 4ms",
			base: Baseline{"wal_fsync": {P99: 500 * time.Microsecond, Median: 200 * time.Microsecond}},
			steps: []step{
				{wal(0, 3.9, 0.3, 100), Hold, "within limit", false},
				{wal(1000, 4.1, 0.3, 100), Freeze, "p99", false},
				{wal(1500, 4.1, 1.4, 100), Thaw, "median back", false}, // thaw level 1.5ms
			},
			stats: Stats{Freezes: 1, Frozen: 500 * msec},
		},
		{
			name: "a signal without baseline is ignored",
			base: Baseline{"backend_commit": {P99: 10 * msec, Median: 3 * msec}},
			steps: []step{
				{wal(0, 500, 300, 100), Hold, "within limit", false},
			},
		},
		{
			name: "deadline: forced thaw, then no pacing",
			cfg:  Config{Deadline: 5 * time.Second},
			steps: []step{
				{wal(0, 12, 3, 100), Hold, "within limit", false},
				{wal(4500, 50, 9, 100), Freeze, "p99", false},
				{wal(5000, 50, 9, 100), Thaw, "deadline", true},
				{wal(9000, 50, 9, 100), Hold, "deadline passed", false},
			},
			stats: Stats{Freezes: 1, ForcedThaws: 1, Frozen: 500 * msec},
		},
		{
			name: "total freeze budget: forced thaw, then no pacing",
			cfg:  Config{MaxTotalFrozen: 1500 * msec},
			steps: []step{
				{wal(0, 50, 9, 100), Freeze, "p99", false},
				{wal(1000, 50, 9, 100), Hold, "still above", false},
				{wal(1500, 50, 9, 100), Thaw, "budget spent", true},
				{wal(9000, 50, 9, 100), Hold, "budget spent", false},
			},
			stats: Stats{Freezes: 1, ForcedThaws: 1, Frozen: 1500 * msec},
		},
		{
			name: "run share 1 never freezes",
			cfg:  Config{MinRunShare: 1},
			steps: []step{
				{wal(0, 50, 9, 100), Hold, "never freezing", false},
			},
		},
		{
			name: "PSI alone (no etcd, no disk baseline)",
			cfg:  Config{StallFreeze: 0.4, StallThaw: 0.1},
			base: Baseline{},
			steps: []step{
				{Sample{At: t0, Stall: 0.2}, Hold, "within limit", false},
				{Sample{At: t0.Add(time.Second), Stall: 0.6}, Freeze, "stall share", false},
				{Sample{At: t0.Add(1500 * msec), Stall: 0.3}, Hold, "still above thaw level", false},
				{Sample{At: t0.Add(1800 * msec), Stall: 0.05}, Thaw, "median back", false},
			},
			stats: Stats{Freezes: 1, Frozen: 800 * msec},
		},
		{
			// etcd's metrics are scraped once a second: a window without a
			// new scrape has no observations, and low PSI must not thaw.
			name: "silent latency signal is unknown, not calm: PSI alone does not thaw",
			cfg:  Config{StallFreeze: 0.4, StallThaw: 0.2, StallOwn: true},
			steps: []step{
				{wal(0, 45, 8, 100), Freeze, "p99 above limit", false},
				{Sample{At: t0.Add(300 * msec), Stall: 0.01}, Hold, "no latency observed", false},
				{wal(1000, 12, 3, 20), Thaw, "median back", false},
			},
			stats: Stats{Freezes: 1, Frozen: time.Second},
		},
		{
			// Disk await counts the stager's own requests: with etcd's own
			// PSI it must not decide.
			name: "etcd's own PSI stands in for its latency; disk await ignored",
			cfg:  Config{StallFreeze: 0.4, StallThaw: 0.2, StallOwn: true},
			base: Baseline{"disk_await/vdb": {P99: 2 * msec, Median: 2 * msec, N: 100}},
			steps: []step{
				{awaitStall(0, 200, 0.1), Hold, "within limit", false},
				{awaitStall(1000, 300, 0.5), Freeze, "stall share", false},
				{awaitStall(1300, 300, 0.1), Thaw, "median back", false},
			},
			stats: Stats{Freezes: 1, Frozen: 300 * msec},
		},
		{
			name: "disk await decides when PSI is not etcd's own",
			cfg:  Config{StallFreeze: 0.4, StallThaw: 0.2},
			base: Baseline{"disk_await/vdb": {P99: 2 * msec, Median: 2 * msec, N: 100}},
			steps: []step{
				{awaitStall(0, 200, 0.1), Freeze, "p99 above limit", false},
			},
			stats: Stats{Freezes: 1},
		},
		{
			name: "own PSI unreadable: disk await decides",
			cfg:  Config{StallFreeze: 0.4, StallThaw: 0.2, StallOwn: true},
			base: Baseline{"disk_await/vdb": {P99: 2 * msec, Median: 2 * msec, N: 100}},
			steps: []step{
				{awaitStall(0, 200, -1), Freeze, "p99 above limit", false},
			},
			stats: Stats{Freezes: 1},
		},
		{
			// Learned 0.3 before staging: freeze at 2x = 0.6, thaw below
			// 1.5x = 0.45, not at the configured 0.4 / 0.2.
			name: "stall levels scale with the learned stall share",
			cfg:  Config{StallFreeze: 0.4, StallThaw: 0.2, StallOwn: true, StallBase: 0.3},
			base: Baseline{},
			steps: []step{
				{Sample{At: t0, Stall: 0.55}, Hold, "within limit", false},
				{Sample{At: t0.Add(time.Second), Stall: 0.65}, Freeze, "stall share", false},
				{Sample{At: t0.Add(1300 * msec), Stall: 0.5}, Hold, "still above thaw level", false},
				{Sample{At: t0.Add(1600 * msec), Stall: 0.4}, Thaw, "median back", false},
			},
			stats: Stats{Freezes: 1, Frozen: 600 * msec},
		},
		{
			name: "freezes that keep reaching the cap stop: the brake retries once per FutileRetry",
			cfg:  Config{FutileFreezes: 2, FutileRetry: 10 * time.Second, MinRunShare: 0.5},
			steps: []step{
				{wal(0, 50, 9, 100), Freeze, "p99", false},
				{wal(2000, 60, 12, 50), Thaw, "cap", true},
				{wal(4000, 60, 12, 50), Freeze, "p99", false},
				{wal(6000, 60, 12, 50), Thaw, "cap", true},
				// Two in a row did not help: no freeze for 10s after the thaw,
				// though the run share floor (2s) allows one.
				{wal(8500, 60, 12, 50), Hold, "freezing has not helped", false},
				{wal(15900, 60, 12, 50), Hold, "freezing has not helped", false},
				{wal(16000, 60, 12, 50), Freeze, "p99", false},
				// This one helps: the brake is back.
				{wal(16500, 30, 3, 50), Thaw, "median back", false},
				{wal(17000, 60, 12, 50), Freeze, "p99", false},
			},
			stats: Stats{Freezes: 4, ForcedThaws: 2, Frozen: 4500 * msec, FutileRetries: 1},
		},
		{
			name: "a freeze that reaches the cap with etcd calm again is not futile",
			cfg:  Config{FutileFreezes: 1, FutileRetry: 10 * time.Second, MinRunShare: 0.5},
			steps: []step{
				{wal(0, 50, 9, 100), Freeze, "p99", false},
				{wal(2000, 30, 3, 50), Thaw, "cap", true},
				{wal(4000, 60, 12, 50), Freeze, "p99", false},
			},
			stats: Stats{Freezes: 2, ForcedThaws: 1, Frozen: 2 * time.Second},
		},
		{
			name: "negative FutileFreezes: always freeze",
			cfg:  Config{FutileFreezes: -1, MinRunShare: 0.5},
			steps: []step{
				{wal(0, 50, 9, 100), Freeze, "p99", false},
				{wal(2000, 60, 12, 50), Thaw, "cap", true},
				{wal(4000, 60, 12, 50), Freeze, "p99", false},
				{wal(6000, 60, 12, 50), Thaw, "cap", true},
				{wal(8000, 60, 12, 50), Freeze, "p99", false},
				{wal(10000, 60, 12, 50), Thaw, "cap", true},
				{wal(12000, 60, 12, 50), Freeze, "p99", false},
			},
			stats: Stats{Freezes: 4, ForcedThaws: 3, Frozen: 6 * time.Second},
		},
		{
			name: "a member stalled nearly always still freezes below 100%",
			cfg:  Config{StallFreeze: 0.4, StallOwn: true, StallBase: 0.8},
			base: Baseline{},
			steps: []step{
				{Sample{At: t0, Stall: 0.9}, Hold, "within limit", false},
				{Sample{At: t0.Add(time.Second), Stall: 0.96}, Freeze, "stall share", false},
			},
			stats: Stats{Freezes: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.base
			if b == nil {
				b = base
			}
			c := NewController(tc.cfg, b)
			var last Decision
			for i, st := range tc.steps {
				d := c.Step(st.s)
				if d.Action != st.action || !strings.Contains(d.Reason, st.reason) || d.Forced != st.forced {
					t.Fatalf("step %d: got %s %q forced=%v, want %s %q forced=%v (%+v)", i, d.Action, d.Reason, d.Forced, st.action, st.reason, st.forced, d)
				}
				last = d
			}
			if got := c.Stats(last.At); got != tc.stats {
				t.Errorf("stats %+v, want %+v", got, tc.stats)
			}
		})
	}
}

func TestDecisionCarriesNumbers(t *testing.T) {
	c := NewController(Config{}, Baseline{"wal_fsync": {P99: 10 * msec, Median: 3 * msec}})
	c.Step(wal(0, 5, 2, 10))
	d := c.Step(wal(1000, 45, 8, 77))
	if d.Action != Freeze || d.Signal != "wal_fsync" || d.P99 != 45*msec || d.Limit != 20*msec ||
		d.Median != 8*msec || d.ThawLevel != 4500*time.Microsecond || d.N != 77 || d.RunShare != 1 {
		t.Errorf("decision %+v", d)
	}
	if !d.Recheck.Equal(t0.Add(1200 * msec)) {
		t.Errorf("recheck %v, want at the end of the shortest freeze", d.Recheck)
	}
	waiting := wal(3000, 45, 8, 7)
	waiting.CPUWait = 0.25 // logged, deciding nothing
	d = c.Step(waiting)
	if d.Action != Thaw || !d.Forced || d.FrozenFor != 2*time.Second || math.Abs(d.RunShare-1.0/3) > 1e-9 {
		t.Errorf("forced thaw %+v", d)
	}
	attrs := d.LogAttrs()
	want := map[string]any{"action": "thaw", "p99_ms": 45.0, "limit_ms": 20.0, "frozen_for_ms": 2000.0, "forced": true, "etcd_cpu_wait_share": 0.25}
	for i := 0; i+1 < len(attrs); i += 2 {
		if w, ok := want[attrs[i].(string)]; ok {
			if attrs[i+1] != w {
				t.Errorf("%s = %v, want %v", attrs[i], attrs[i+1], w)
			}
			delete(want, attrs[i].(string))
		}
	}
	if len(want) > 0 {
		t.Errorf("missing log attributes %v", want)
	}
}

func TestBaselineByMetricName(t *testing.T) {
	c := NewController(Config{}, Baseline{MetricWALFsync: {P99: 10 * msec, Median: 3 * msec}})
	if d := c.Step(wal(0, 45, 8, 10)); d.Action != Freeze {
		t.Errorf("a baseline keyed by the metric name was ignored: %+v", d)
	}
	if SignalName(MetricBackendCommit) != SignalBackendCommit || SignalName("disk_await/vdb") != "disk_await/vdb" {
		t.Error("SignalName")
	}
}

func TestRelease(t *testing.T) {
	c := NewController(Config{}, Baseline{"wal_fsync": {P99: 10 * msec, Median: 3 * msec}})
	if d := c.Release(t0, "nothing"); d.Action != Hold {
		t.Errorf("release unfrozen: %+v", d)
	}
	c.Step(wal(0, 50, 9, 10))
	d := c.Release(t0.Add(700*msec), "context canceled")
	if d.Action != Thaw || !d.Forced || !strings.Contains(d.Reason, "context canceled") || c.Frozen() {
		t.Errorf("release frozen: %+v", d)
	}
	if s := c.Stats(t0.Add(time.Second)); s != (Stats{Freezes: 1, ForcedThaws: 1, Frozen: 700 * msec}) {
		t.Errorf("stats %+v", s)
	}
}

func TestRunShareFor(t *testing.T) {
	for _, tc := range []struct {
		deadline, expected time.Duration
		want               float64
	}{
		{time.Hour, 15 * time.Minute, 0.25},
		{time.Hour, time.Minute, 0.1},
		{time.Minute, time.Hour, 1},
		{0, time.Minute, 0.2},
	} {
		if got := RunShareFor(tc.deadline, tc.expected); got != tc.want {
			t.Errorf("RunShareFor(%s, %s) = %g, want %g", tc.deadline, tc.expected, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, bad := range []Config{
		{FreezeFactor: 1}, {ThawFactor: 3}, {ThawFactor: 0.5}, {MinFreeze: 3 * time.Second},
		{MinRunShare: 1.5}, {StallFreeze: 0.2, StallThaw: 0.3},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

package guard

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestStepModel(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	base := Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 4 * time.Millisecond, N: 100}}
	wal := func(s float64, p99 time.Duration) RateInput {
		return RateInput{Sample: Sample{At: at(s), Latency: map[string]Stat{SignalWALFsync: {P99: p99, Median: p99 / 2, N: 20}}, Stall: -1}}
	}
	// 125 fsyncs over the long window, slow ones at 16-32 ms (over the
	// brake's 2 x 10 ms only in the last bucket: 32 ms).
	long := func(s float64, slow uint64) RateInput {
		h := Histogram{Bounds: []float64{0.004, 0.008, 0.016, 0.032, math.Inf(1)}}
		h.Counts = []uint64{0, 125 - slow, 125 - slow, 125 - slow, 125}
		in := wal(s, 40*time.Millisecond)
		in.Long = Sample{Hists: map[string]Histogram{SignalWALFsync: h}}
		return in
	}
	// The books read over a 5 s window; share -1: the share unknown (a
	// stager's cgroup gone in it).
	others := func(in RateInput, share float64) RateInput {
		in.Sample.Others, in.Sample.Books, in.Sample.Span = share, true, 5*time.Second
		return in
	}
	young := func(in RateInput) RateInput {
		in = others(in, 0.1)
		in.Sample.Span = 250 * time.Millisecond
		return in
	}
	cfg := ModelConfig{Deadline: time.Hour}.WithDefaults(2)
	fresh := ModelState{}
	cut := ModelState{Scale: 0.5, Start: at(-60), Last: at(-1), LastCut: at(-1), Cuts: 1}
	calm := ModelState{Scale: 0.25, Start: at(-120), Last: at(-31), LastCut: at(-31), Cuts: 2}
	cases := []struct {
		name   string
		st     ModelState
		in     RateInput
		scale  float64
		reason string
	}{
		{"first step: scale 1, calm", fresh, wal(0, 12*time.Millisecond), 1, "calm"},
		{"over 2 x the baseline p99 halves the model", fresh, wal(0, 25*time.Millisecond), 0.5,
			"etcd over the brake's limit: the model overstates the disk, scaling it down"},
		{"within the brake's limit (1.9x) is not a cut: the QoS's business", fresh, wal(0, 19*time.Millisecond), 1, "calm"},
		{"counted over the long window: 4 of 125 over the limit is chance", fresh, long(0, 4), 1, "calm"},
		{"5 of 125 is beyond chance", fresh, long(0, 5), 0.5,
			"etcd over the brake's limit: the model overstates the disk, scaling it down"},
		{"a second cut waits a long window for the first to show", cut, wal(0, 50*time.Millisecond), 0.5,
			"over the limit, but the last cut has not shown yet"},
		{"after it, halved again", cut, wal(5, 50*time.Millisecond), 0.25,
			"etcd over the brake's limit: the model overstates the disk, scaling it down"},
		{"never below 1/16", ModelState{Scale: 1.0 / 16, Start: at(-60), Last: at(-10), LastCut: at(-10)}, wal(0, 50*time.Millisecond), 1.0 / 16,
			"over the limit at the least scale: holding"},
		{"calm for 30 s raises it 1.25x", calm, wal(0, 12*time.Millisecond), 0.3125, "calm for a while: scaling the model back up"},
		{"calm for less holds", ModelState{Scale: 0.25, Start: at(-120), Last: at(-29), LastCut: at(-29)}, wal(0, 12*time.Millisecond), 0.25, "calm"},
		{"no raise while the long window is over the limit, within chance", calm, long(0, 3), 0.25,
			"within chance of the limit, not within it: holding"},
		{"a raise with etcd within the limit (2x), over the promise (1.3x): a cut on etcd slowed by another cause heals", calm, wal(0, 16*time.Millisecond), 0.3125,
			"calm for a while: scaling the model back up"},
		{"nothing observed: hold", cut, RateInput{Sample: Sample{At: at(10), Stall: -1}}, 0.5, "no signal in the window: holding"},
		{"the stall share and the device queue do not decide (they count the stager's waits)", cut,
			RateInput{Sample: Sample{At: at(10), Stall: 0.9, QueueDepth: 40}, StallBase: 0.1}, 0.5, "no signal in the window: holding"},
		{"etcd too slow to answer its metrics is a cut", cut, RateInput{Sample: Sample{At: at(10), Stall: -1, MetricsTimeout: true}}, 0.25,
			"etcd over the brake's limit: the model overstates the disk, scaling it down"},
		{"no books (iocost's not read): cut as etcd says", fresh, wal(0, 25*time.Millisecond), 0.5,
			"etcd over the brake's limit: the model overstates the disk, scaling it down"},
		{"books read, the share unknown: no cut", fresh, others(wal(0, 25*time.Millisecond), -1), 1,
			"over the limit, but the other tenants' share is not known yet: holding"},
		{"books over less than 1 s (the kernel updates them once a period): no cut", fresh, young(wal(0, 25*time.Millisecond)), 1,
			"over the limit, but the other tenants' share is not known yet: holding"},
		{"the other tenants at 20 % of the budget: a cut leaves them within half of it", fresh, others(wal(0, 25*time.Millisecond), 0.2), 0.5,
			"etcd over the brake's limit: the model overstates the disk, scaling it down"},
		{"at 30 %: a cut would take them to 60 %, not made", cut, others(wal(5, 50*time.Millisecond), 0.3), 0.5,
			"over the limit, but a cut would leave the other tenants less than they use: holding"},
		{"over half of it: the model goes back up, etcd slow or not (a cut throttles etcd too)",
			ModelState{Scale: 0.125, Start: at(-60), Last: at(-5), LastCut: at(-5), Cuts: 3}, others(wal(0, 50*time.Millisecond), 1.15), 0.25,
			"the other tenants need more than the brake leaves them: scaling the model back up"},
		{"one step a cooldown", cut, others(wal(0, 50*time.Millisecond), 0.8), 0.5,
			"the other tenants need more than the brake leaves them, but the last change has not shown yet"},
		{"never above 1", ModelState{Scale: 0.75, Start: at(-60), Last: at(-10), LastCut: at(-10), Cuts: 1}, others(wal(0, 12*time.Millisecond), 0.6), 1,
			"the other tenants need more than the brake leaves them: scaling the model back up"},
		{"past the deadline the model goes back to 1, whatever etcd says", ModelState{Scale: 0.25, Start: at(-3600), Last: at(-10), LastCut: at(-10)},
			wal(0, 50*time.Millisecond), 1, "deadline reached: the model back as the window started, so staging finishes"},
		{"and stays there", ModelState{Scale: 1, Start: at(-3700), PastDeadline: true}, wal(0, 50*time.Millisecond), 1,
			"past the deadline: the model as the window started"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, d := StepModel(cfg, base, c.st, c.in)
			if d.Scale != c.scale || st.Scale != c.scale || d.Reason != c.reason || d.Changed != (c.scale != max(c.st.Scale, 0)) && !c.st.Start.IsZero() {
				t.Errorf("got scale %g (state %g) %q changed=%v, want %g %q", d.Scale, st.Scale, d.Reason, d.Changed, c.scale, c.reason)
			}
			if d.Cut != (st.Cuts > c.st.Cuts) {
				t.Errorf("cut %v with cuts %d -> %d", d.Cut, c.st.Cuts, st.Cuts)
			}
		})
	}
}

// The guard loop under a model brake: etcd over the limit sets the scale
// through Set (halved, then halved again a long window later), and the
// stats carry the cuts and the scale it ended at. Without Set the loop
// never scales.
func TestGuardScalesTheModel(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	src := &scriptSource{clk: clk, start: clk.Now(), latency: func(time.Duration) time.Duration { return 50 * time.Millisecond }}
	var mu sync.Mutex
	var scales []float64
	o := Options{Units: []string{"stage.service"}, Clock: clk, LearnFor: -1,
		Config: Config{FutileFreezes: -1},
		Model: ModelOptions{Set: func(_ context.Context, s float64) error {
			mu.Lock()
			defer mu.Unlock()
			scales = append(scales, s)
			return nil
		}}}
	st := runGuardFor(t, o, src, &fakeFreezer{clk: clk, start: clk.Now()}, clk,
		Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 4 * time.Millisecond}}, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(scales) < 2 || scales[0] != 0.5 || scales[1] != 0.25 {
		t.Fatalf("scales set %v over 10 s of etcd at 5x its p99, want 0.5 then 0.25 (one cut a long window)", scales)
	}
	if st.ModelCuts != len(scales) || st.ModelScale != scales[len(scales)-1] {
		t.Errorf("stats: %d cuts, scale %g; want %d and %g", st.ModelCuts, st.ModelScale, len(scales), scales[len(scales)-1])
	}
}

// scrapedSource is etcd as the guard reads it in production: 25 WAL
// fsyncs a second, its metrics scraped every 3 s (guard.metrics_interval;
// reads between scrapes carry the last scrape's histograms), overPerScrape
// of each scrape's 75 fsyncs at 40 ms, the rest at 5 ms.
type scrapedSource struct {
	mu            sync.Mutex
	clk           clockwork.Clock
	start         time.Time
	overPerScrape uint64
	scrapes       uint64
	last          time.Time
}

func (s *scrapedSource) Read(context.Context) (Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if s.last.IsZero() || now.Sub(s.last) >= 3*time.Second {
		s.scrapes = uint64(now.Sub(s.start) / (3 * time.Second))
		s.last = s.start.Add(time.Duration(s.scrapes) * 3 * time.Second)
	}
	total, over := 75*s.scrapes, s.overPerScrape*s.scrapes
	// etcd's own bounds (powers of 2 ms): fast ones at 5 ms, slow ones at 40 ms.
	h := Histogram{Bounds: []float64{0.004, 0.008, 0.016, 0.032, 0.064, math.Inf(1)},
		Counts: []uint64{0, total - over, total - over, total - over, total, total}}
	return Reading{At: now, Hists: map[string]Histogram{MetricWALFsync: h}}, nil
}

// The brake counts over its own window, not the one freezes cut. With the
// production settings (ticks 250 ms, scrapes 3 s, freezes <= 2 s), 3 of
// 75 fsyncs a scrape over the limit freeze at every scrape, each freeze
// ends before the next scrape, and a window cut at every freeze and thaw
// held one scrape (3 of 75: chance) until the futile-freeze rule stopped
// freezing: the first cut came at 15 s (brake-ext4-200MiB-2: cuts 8-21 s
// into staging). Counted across the freezes, two scrapes (6 of 150) are
// beyond chance: the cut comes at the second scrape.
func TestModelBrakeCountsAcrossFreezes(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Unix(1200, 0))
	src := &scrapedSource{clk: clk, start: clk.Now(), overPerScrape: 3}
	cfg, _ := Thresholds{LatencyFactor: 2, ThawFactor: 1.5, MinFreeze: 200 * time.Millisecond, MaxFreeze: 2 * time.Second,
		MinRunShare: 0.2, MaxTotalPause: 30 * time.Minute}.Derive()
	var mu sync.Mutex
	var cutAt []time.Duration
	o := Options{Units: []string{"stage.service"}, Clock: clk, LearnFor: -1, Config: cfg,
		Interval: 250 * time.Millisecond, Window: time.Second,
		Model: ModelOptions{Set: func(_ context.Context, s float64) error {
			mu.Lock()
			defer mu.Unlock()
			cutAt = append(cutAt, clk.Since(src.start))
			return nil
		}}}
	st := runGuardFor(t, o, src, &fakeFreezer{clk: clk, start: clk.Now()}, clk,
		Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 5 * time.Millisecond}}, 20*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if st.Freezes < 2 {
		t.Fatalf("%d freezes: the scenario is freezes at every scrape", st.Freezes)
	}
	if len(cutAt) == 0 || cutAt[0] > 7*time.Second {
		t.Errorf("model scaled at %v (%d freezes): want the first cut by the second scrape (6 s)", cutAt, st.Freezes)
	}
}

// runGuardFor runs a guard on the fake clock for d, in 250 ms ticks, and
// returns its stats.
func runGuardFor(t *testing.T, o Options, src Source, fz Freezer, clk *clockwork.FakeClock, base Baseline, d time.Duration) Stats {
	t.Helper()
	g, err := New(o, src, fz)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Stats)
	go func() { done <- g.Run(ctx, base) }()
	for end := clk.Now().Add(d); clk.Now().Before(end); {
		clk.BlockUntilContext(ctx, 1)
		clk.Advance(250 * time.Millisecond)
	}
	cancel()
	return <-done
}

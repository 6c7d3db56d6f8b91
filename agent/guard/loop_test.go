package guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// scriptSource simulates etcd doing 100 WAL fsyncs a second whose latency
// is latency(elapsed).
type scriptSource struct {
	mu      sync.Mutex
	clk     clockwork.Clock
	start   time.Time
	last    time.Time
	latency func(elapsed time.Duration) time.Duration
	counts  []uint64
	fail    bool
}

var testBounds = []float64{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, math.Inf(1)}

func (s *scriptSource) Read(context.Context) (Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if s.fail {
		return Reading{At: now}, errors.New("etcd down")
	}
	if s.counts == nil {
		s.counts = make([]uint64, len(testBounds))
	}
	if s.last.IsZero() {
		s.last = s.start
	}
	n := uint64(now.Sub(s.last) / (10 * time.Millisecond))
	s.last = now
	l := s.latency(now.Sub(s.start)).Seconds()
	for i, b := range testBounds {
		if l <= b {
			for j := i; j < len(s.counts); j++ {
				s.counts[j] += n
			}
			break
		}
	}
	h := Histogram{Bounds: testBounds, Counts: append([]uint64(nil), s.counts...)}
	return Reading{At: now, Hists: map[string]Histogram{MetricWALFsync: h}}, nil
}

type call struct {
	op, unit string
	at       time.Duration
}

type fakeFreezer struct {
	mu    sync.Mutex
	clk   clockwork.Clock
	start time.Time
	calls []call
	fail  map[string]bool
}

func (f *fakeFreezer) record(op, unit string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{op, unit, f.clk.Now().Sub(f.start)})
	if f.fail[unit] {
		return errors.New(unit + " is not active")
	}
	return nil
}
func (f *fakeFreezer) Freeze(_ context.Context, u string) error { return f.record("freeze", u) }
func (f *fakeFreezer) Thaw(ctx context.Context, u string) error {
	if ctx.Err() != nil {
		return ctx.Err() // a thaw with a dead context would never reach systemd
	}
	return f.record("thaw", u)
}

// state returns whether each unit ended frozen.
func (f *fakeFreezer) state() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]bool{}
	for _, c := range f.calls {
		m[c.unit] = c.op == "freeze"
	}
	return m
}

func (f *fakeFreezer) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.op == op {
			n++
		}
	}
	return n
}

// drive advances the fake clock in small steps until d has passed.
func drive(t *testing.T, clk *clockwork.FakeClock, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	end := clk.Now().Add(d)
	for clk.Now().Before(end) {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("loop never waited: %v", err)
		}
		clk.Advance(50 * time.Millisecond)
	}
}

func newTestGuard(t *testing.T, latency func(time.Duration) time.Duration, log io.Writer) (*Guard, *clockwork.FakeClock, *scriptSource, *fakeFreezer) {
	clk := clockwork.NewFakeClockAt(t0)
	src := &scriptSource{clk: clk, start: t0, latency: latency}
	fz := &fakeFreezer{clk: clk, start: t0, fail: map[string]bool{}}
	g, err := New(Options{
		LearnFor: 5 * time.Second, Units: []string{"update-agent-staging.service", "rpm-ostreed.service"},
		Clock: clk, Log: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, src, fz)
	if err != nil {
		t.Fatal(err)
	}
	return g, clk, src, fz
}

func TestLoopPacesAndAlwaysThaws(t *testing.T) {
	// 2ms normally; 50ms from 8s to 11s into the run (learning takes 5s).
	lat := func(e time.Duration) time.Duration {
		if e >= 8*time.Second && e < 11*time.Second {
			return 50 * time.Millisecond
		}
		return 2 * time.Millisecond
	}
	var log strings.Builder
	g, clk, _, fz := newTestGuard(t, lat, &log)

	learned := make(chan Baseline, 1)
	go func() {
		b, err := g.Learn(context.Background())
		if err != nil {
			t.Error(err)
		}
		learned <- b
	}()
	drive(t, clk, 5*time.Second)
	base := <-learned
	if b := base["wal_fsync"]; b.N < 20 || b.P99 > 2*time.Millisecond || b.P99 <= time.Millisecond {
		t.Fatalf("baseline %+v", base)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Stats, 1)
	go func() { done <- g.Run(ctx, base) }()
	drive(t, clk, 7*time.Second) // to 12s: through the slow period
	if fz.count("freeze") == 0 {
		t.Fatalf("never froze; log:\n%s", log.String())
	}
	if fz.count("thaw") == 0 {
		t.Errorf("never thawed while latency was high (cap); log:\n%s", log.String())
	}
	drive(t, clk, 3*time.Second) // latency normal again
	freezesBefore := fz.count("freeze")
	drive(t, clk, 2*time.Second)
	if fz.count("freeze") != freezesBefore {
		t.Errorf("froze while latency was normal")
	}
	cancel()
	st := <-done
	for u, frozen := range fz.state() {
		if frozen {
			t.Errorf("%s left frozen", u)
		}
	}
	if st.Freezes == 0 || st.Freezes*2 != fz.count("freeze") || st.Frozen <= 0 || st.Frozen > 3*time.Second {
		t.Errorf("stats %+v, freeze calls %d", st, fz.count("freeze"))
	}
	for _, want := range []string{"latency guard baseline", "action=freeze", "p99_ms=", "limit_ms=", "action=thaw", "latency guard stopped", "frozen_seconds="} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

func TestLoopThawsOnCancelWhileFrozen(t *testing.T) {
	lat := func(time.Duration) time.Duration { return 100 * time.Millisecond }
	var log strings.Builder
	g, clk, src, fz := newTestGuard(t, lat, &log)
	fz.fail["rpm-ostreed.service"] = true // not running: must not stop the rest
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Stats, 1)
	go func() {
		done <- g.Run(ctx, Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}})
	}()
	drive(t, clk, 1500*time.Millisecond)
	if st := fz.state(); !st["update-agent-staging.service"] {
		t.Fatalf("not frozen: %v\n%s", fz.calls, log.String())
	}
	src.mu.Lock()
	src.fail = true // inputs fail while frozen: the cap still applies
	src.mu.Unlock()
	cancel()
	st := <-done
	if fz.state()["update-agent-staging.service"] {
		t.Errorf("left frozen after cancel: %v", fz.calls)
	}
	if st.ForcedThaws != 1 || st.Freezes != 1 {
		t.Errorf("stats %+v", st)
	}
	if !strings.Contains(log.String(), "guard stopping: context canceled") {
		t.Errorf("log:\n%s", log.String())
	}
}

func TestLoopCapHoldsWhenInputsFail(t *testing.T) {
	lat := func(time.Duration) time.Duration { return 100 * time.Millisecond }
	var log strings.Builder
	g, clk, src, fz := newTestGuard(t, lat, &log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Stats, 1)
	go func() {
		done <- g.Run(ctx, Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}})
	}()
	drive(t, clk, 1100*time.Millisecond)
	src.mu.Lock()
	src.fail = true
	src.mu.Unlock()
	drive(t, clk, 3*time.Second)
	if fz.state()["update-agent-staging.service"] {
		t.Errorf("still frozen 3s after etcd went away: %v", fz.calls)
	}
	if !strings.Contains(log.String(), "etcd down") || strings.Count(log.String(), "etcd down") > 1 {
		t.Errorf("the read error should be logged once:\n%s", log.String())
	}
	cancel()
	<-done
}

func TestLearnNeedsObservations(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	src := &scriptSource{clk: clk, start: t0, fail: true}
	g, err := New(Options{LearnFor: time.Second, Units: []string{"x.service"}, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, src, &fakeFreezer{clk: clk})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := g.Learn(context.Background()); errc <- err }()
	drive(t, clk, time.Second)
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "no signal had 20 observations") {
		t.Errorf("err %v", err)
	}
	// A configured baseline needs no learning.
	g2, _ := New(Options{LearnFor: -1, Baseline: Baseline{"wal_fsync": {P99: time.Millisecond}}, Units: []string{"x.service"}, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, src, &fakeFreezer{clk: clk})
	if b, err := g2.Learn(context.Background()); err != nil || b["wal_fsync"].P99 != time.Millisecond {
		t.Errorf("configured baseline %v %v", b, err)
	}
	// A configured p99 keeps the learned median.
	src3 := &scriptSource{clk: clk, start: t0, latency: func(time.Duration) time.Duration { return 3 * time.Millisecond }}
	g3, _ := New(Options{LearnFor: time.Second, Baseline: Baseline{"wal_fsync": {P99: 40 * time.Millisecond}}, Units: []string{"x.service"}, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, src3, &fakeFreezer{clk: clk})
	go func() {
		b, err := g3.Learn(context.Background())
		if err != nil || b["wal_fsync"].P99 != 40*time.Millisecond || b["wal_fsync"].Median < 2*time.Millisecond || b["wal_fsync"].Median > 3*time.Millisecond {
			t.Errorf("merged baseline %+v %v", b, err)
		}
		errc <- nil
	}()
	drive(t, clk, time.Second)
	<-errc
	if _, err := New(Options{Units: []string{"x"}, Config: Config{FreezeFactor: 0.5}}, src, nil); err == nil {
		t.Error("bad config accepted")
	}
}

// psiSource is a cgroup io.pressure stalled share(elapsed) of the time.
type psiSource struct {
	mu    sync.Mutex
	clk   clockwork.Clock
	last  time.Time
	total time.Duration
	share func(elapsed time.Duration) float64
	start time.Time
}

func (s *psiSource) Read(context.Context) (Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if !s.last.IsZero() {
		s.total += time.Duration(s.share(now.Sub(s.start)) * float64(now.Sub(s.last)))
	}
	s.last = now
	return Reading{At: now, Pressure: &Pressure{SomeTotal: s.total}}, nil
}

func TestLearnedStallShareRaisesTheLevels(t *testing.T) {
	// etcd normally stalls 45% of the time: above the configured 0.4, so
	// only the learned share (freeze at 2x = 0.9) keeps the guard calm
	// until the stall really grows.
	clk := clockwork.NewFakeClockAt(t0)
	src := &psiSource{clk: clk, start: t0, share: func(e time.Duration) float64 {
		if e >= 8*time.Second {
			return 0.95
		}
		return 0.45
	}}
	fz := &fakeFreezer{clk: clk, start: t0, fail: map[string]bool{}}
	g, err := New(Options{LearnFor: 2 * time.Second, Interval: 250 * time.Millisecond, Window: time.Second,
		Config: Config{StallFreeze: 0.4, StallThaw: 0.2, StallOwn: true},
		Units:  []string{"s.service"}, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, src, fz)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	var base Baseline
	go func() {
		var err error
		base, err = g.Learn(context.Background())
		errc <- err
	}()
	drive(t, clk, 2*time.Second)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx, base); close(done) }()
	drive(t, clk, 5*time.Second) // to 7s: still 0.45
	if n := fz.count("freeze"); n != 0 {
		t.Fatalf("%d freezes at the learned stall share", n)
	}
	drive(t, clk, 2*time.Second) // past 8s: 0.95
	if n := fz.count("freeze"); n == 0 {
		t.Error("no freeze once the stall share passed 2x the learned one")
	}
	cancel()
	<-done
}

// runRateLoop runs the guard with the rate loop for d of fake time on the
// fsync latency lat, with max as the loop's top rate (0: the default), and
// returns the rates it set, its stats and its log.
func runRateLoop(t *testing.T, lat func(time.Duration) time.Duration, maxRate uint64, d time.Duration) ([]uint64, Stats, string) {
	t.Helper()
	var log strings.Builder
	g, clk, _, _ := newTestGuard(t, lat, &log)
	var mu sync.Mutex
	var rates []uint64
	g.o.Rate.Set = func(_ context.Context, r uint64) error {
		mu.Lock()
		defer mu.Unlock()
		rates = append(rates, r)
		return nil
	}
	g.o.Rate.Config.Max = maxRate
	base := Baseline{SignalWALFsync: {P99: 2 * time.Millisecond, Median: 2 * time.Millisecond, N: 100}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Stats, 1)
	go func() { done <- g.Run(ctx, base) }()
	drive(t, clk, d)
	cancel()
	st := <-done
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(rates), st, log.String()
}

func TestLoopPacesTheWriteRate(t *testing.T) {
	// 2ms normally; 50ms from 12s to 14s into the run: the rate, probed up
	// every 5 s, is cut, then probed up again.
	lat := func(e time.Duration) time.Duration {
		if e >= 12*time.Second && e < 14*time.Second {
			return 50 * time.Millisecond
		}
		return 2 * time.Millisecond
	}
	rates, st, log := runRateLoop(t, lat, 0, 24*time.Second)
	if len(rates) < 3 || rates[0] != 4_000_000 {
		t.Fatalf("rates %v: want the start rate first, then changes", rates)
	}
	cut := false
	for i := 1; i < len(rates); i++ {
		if rates[i] < rates[i-1] {
			cut = true
		}
	}
	if !cut || st.RateCuts == 0 || st.Rate != rates[len(rates)-1] {
		t.Errorf("rates %v, stats %+v: want a cut while etcd was slow", rates, st)
	}
	if !strings.Contains(log, "staging write rate") {
		t.Errorf("rate decisions not logged:\n%s", log)
	}
}

// TestLoopLogsACutAtTheFloor: etcd slow once the loop runs at its floor
// (and top: no probing): the cut changes no rate (nothing is set again)
// but is logged, so an operator sees etcd suffer at the gentlest rate.
func TestLoopLogsACutAtTheFloor(t *testing.T) {
	lat := func(e time.Duration) time.Duration {
		if e >= 3*time.Second { // after the first decision, which is logged anyway
			return 50 * time.Millisecond
		}
		return 2 * time.Millisecond
	}
	rates, st, log := runRateLoop(t, lat, 4_000_000, 8*time.Second)
	if len(rates) != 1 || rates[0] != 4_000_000 || st.Rate != 4_000_000 {
		t.Errorf("rates set %v, ended at %d: want the floor, set once", rates, st.Rate)
	}
	if st.RateCuts == 0 || !strings.Contains(log, "cutting") {
		t.Errorf("%d cuts; the log:\n%s", st.RateCuts, log)
	}
}

// deadlineSource records whether each read was bounded and by how much.
type deadlineSource struct {
	*scriptSource
	fz     *fakeFreezer
	mu     sync.Mutex
	bounds []time.Duration // of the reads while frozen; -1: no deadline
}

func (d *deadlineSource) Read(ctx context.Context) (Reading, error) {
	b := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		b = time.Until(dl)
	}
	if d.fz.state()["update-agent-staging.service"] {
		d.mu.Lock()
		d.bounds = append(d.bounds, b)
		d.mu.Unlock()
	}
	return d.scriptSource.Read(ctx)
}

// While frozen, a read may not outlast the freeze's cap: a scrape etcd is
// too slow to answer (2 s timeout) once held 2 s freezes for 5.9 s.
func TestLoopReadsWhileFrozenAreBoundedByTheCap(t *testing.T) {
	lat := func(time.Duration) time.Duration { return 100 * time.Millisecond }
	var log strings.Builder
	clk := clockwork.NewFakeClockAt(t0)
	fz := &fakeFreezer{clk: clk, start: t0, fail: map[string]bool{}}
	src := &deadlineSource{scriptSource: &scriptSource{clk: clk, start: t0, latency: lat}, fz: fz}
	g, err := New(Options{
		LearnFor: 5 * time.Second, Units: []string{"update-agent-staging.service"},
		Clock: clk, Log: slog.New(slog.NewTextHandler(&log, nil)),
	}, src, fz)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Stats, 1)
	go func() {
		done <- g.Run(ctx, Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}})
	}()
	drive(t, clk, 6*time.Second)
	if fz.count("freeze") == 0 {
		t.Fatalf("never frozen: %v\n%s", fz.calls, log.String())
	}
	cancel()
	<-done
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.bounds) == 0 {
		t.Fatal("no read while frozen")
	}
	for _, b := range src.bounds {
		if b < 0 || b > 2*time.Second {
			t.Errorf("a read while frozen was bounded by %v (-1: not at all), want at most the 2s cap", b)
		}
	}
}

// readTimes records when the guard read.
type readTimes struct {
	mu  sync.Mutex
	clk clockwork.Clock
	at  []time.Duration
}

func (r *readTimes) Read(context.Context) (Reading, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, r.clk.Now().Sub(t0))
	return Reading{At: r.clk.Now(), Disks: map[string]DiskStat{"vdb": {}}}, nil
}

// The loop reads on the interval's grid, not an interval after its last
// read: its ticks and the memory pacer's (NextTick too) wake the process
// together instead of drifting apart.
func TestLoopTicksOnTheGrid(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0.Add(100 * time.Millisecond))
	src := &readTimes{clk: clk}
	g, err := New(Options{LearnFor: -1, Interval: 250 * time.Millisecond, Units: []string{"s.service"}, Clock: clk,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, src, &fakeFreezer{clk: clk, fail: map[string]bool{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx, Baseline{}); close(done) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	for _, d := range []time.Duration{150, 250, 250} {
		if err := clk.BlockUntilContext(wctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(d * time.Millisecond)
	}
	if err := clk.BlockUntilContext(wctx, 1); err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if fmt.Sprint(src.at) != "[100ms 250ms 500ms 750ms]" {
		t.Errorf("reads at %v, want [100ms 250ms 500ms 750ms] (on the 250 ms grid)", src.at)
	}
}

// With the rate loop pacing, the brake freezes above the larger of the two
// factors; without it the rate's factor does not count.
func TestBrakeFactor(t *testing.T) {
	set := func(context.Context, uint64) error { return nil }
	for _, c := range []struct {
		name string
		o    Options
		want float64
	}{
		{"no rate loop: the configured factor", Options{Config: Config{FreezeFactor: 2}, Rate: RateOptions{FreezeFactor: 4}}, 2},
		{"no rate loop, default", Options{}, 2},
		{"rate loop: the larger, its own", Options{Config: Config{FreezeFactor: 2}, Rate: RateOptions{Set: set, FreezeFactor: 4}}, 4},
		{"rate loop: the larger, the configured", Options{Config: Config{FreezeFactor: 1000}, Rate: RateOptions{Set: set, FreezeFactor: 4}}, 1000},
		{"rate loop without its own factor", Options{Rate: RateOptions{Set: set}}, 2},
	} {
		if got := c.o.BrakeFactor(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		c.o.Units = []string{"staging.service"}
		g, err := New(c.o, nil, nil)
		if err != nil || g.o.Config.FreezeFactor != c.want {
			t.Errorf("%s: New's controller freezes at %vx (%v), want %v", c.name, g.o.Config.FreezeFactor, err, c.want)
		}
	}
}

package guard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

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

// stuckFreezer's freezes return only when their context ends: systemd
// answers a freeze once the cgroup is frozen, and a task waiting in the
// kernel (throttled by iocost) freezes only when it wakes.
type stuckFreezer struct{ fakeFreezer }

func (f *stuckFreezer) Freeze(ctx context.Context, u string) error {
	f.record("freeze", u)
	<-ctx.Done()
	return ctx.Err()
}

// A freeze that systemd does not confirm holds the guard no longer than
// the longest freeze: it goes on and thaws at the cap (in the bench the
// guard was held 94 s by one such call).
func TestGuardNotHeldByAStuckFreeze(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	src := &scriptSource{clk: clk, start: clk.Now(), latency: func(time.Duration) time.Duration { return 50 * time.Millisecond }}
	fz := &stuckFreezer{fakeFreezer{clk: clk, start: clk.Now()}}
	g, err := New(Options{Units: []string{"stage.service"}, Clock: clk, LearnFor: -1, Interval: 250 * time.Millisecond,
		Config: Config{MaxFreeze: 2 * time.Second, FutileFreezes: -1}}, src, fz)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Stats)
	go func() {
		done <- g.Run(ctx, Baseline{SignalWALFsync: {P99: 10 * time.Millisecond, Median: 4 * time.Millisecond}})
	}()
	for i := 0; i < 40; i++ { // 10 s
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		err := clk.BlockUntilContext(wctx, 1)
		wcancel()
		if err != nil {
			cancel()
			<-done
			t.Fatalf("the guard is stuck %s in: %v", time.Duration(i)*250*time.Millisecond, fz.calls)
		}
		clk.Advance(250 * time.Millisecond)
	}
	cancel()
	<-done
	thaws := 0
	for _, c := range fz.calls {
		if c.op == "thaw" && c.at < 10*time.Second {
			thaws++
		}
	}
	if thaws < 2 {
		t.Errorf("%d thaws in 10 s with freezes never confirmed: %v", thaws, fz.calls)
	}
}

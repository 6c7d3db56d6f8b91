package guard

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

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

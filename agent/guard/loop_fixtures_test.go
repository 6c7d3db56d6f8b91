package guard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
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

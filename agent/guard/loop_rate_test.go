package guard

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

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

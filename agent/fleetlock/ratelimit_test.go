package fleetlock

import (
	"fmt"
	"testing"
	"time"
)

func TestTake(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Rate{Burst: 3, Every: 10 * time.Second}
	for _, tc := range []struct {
		name   string
		b      bucket
		now    time.Time
		ok     bool
		tokens float64
	}{
		{"new address: a full bucket", bucket{}, t0, true, 2},
		{"tokens left", bucket{tokens: 1, at: t0}, t0, true, 0},
		{"empty", bucket{tokens: 0.5, at: t0}, t0.Add(time.Second), false, 0.6},
		{"refilled one", bucket{tokens: 0, at: t0}, t0.Add(10 * time.Second), true, 0},
		{"refills up to the burst only", bucket{tokens: 0, at: t0}, t0.Add(time.Hour), true, 2},
		{"a clock that went back refills nothing", bucket{tokens: 0.5, at: t0}, t0.Add(-time.Hour), false, 0.5},
	} {
		b, ok := take(tc.b, tc.now, r)
		if ok != tc.ok || b.tokens < tc.tokens-1e-9 || b.tokens > tc.tokens+1e-9 {
			t.Errorf("%s: got %v with %.2f tokens, want %v with %.2f", tc.name, ok, b.tokens, tc.ok, tc.tokens)
		}
		if !tc.now.Before(tc.b.at) && !b.at.Equal(tc.now) {
			t.Errorf("%s: counted at %v, want %v", tc.name, b.at, tc.now)
		}
	}
}

// TestLimiterBounded: addresses beyond maxBuckets share one bucket, and
// full buckets are forgotten to make room.
func TestLimiterBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := &limiter{rate: Rate{Burst: 1, Every: time.Minute}}
	addr := func(i int) string { return fmt.Sprintf("10.0.%d.%d", i/256, i%256) }
	for i := range maxBuckets {
		if !l.allow(addr(i), t0) {
			t.Fatalf("address %d refused", i)
		}
	}
	if !l.allow("new-1", t0) || l.allow("new-2", t0) {
		t.Error("beyond the bound: the first new address should take the shared bucket's token, the second find it empty")
	}
	if len(l.b) > maxBuckets+1 {
		t.Errorf("%d buckets, want at most %d", len(l.b), maxBuckets+1)
	}
	if !l.allow("new-3", t0.Add(time.Minute)) {
		t.Error("a minute later every bucket is full: a new address should get one of its own")
	}
	if len(l.b) > 2 {
		t.Errorf("%d buckets after the full ones were forgotten", len(l.b))
	}
}

package engine

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := Backoff{Base: time.Minute, Max: 30 * time.Minute, Jitter: 0.5}
	for _, c := range []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{1, 0.5, time.Minute},
		{2, 0.5, 2 * time.Minute},
		{4, 0.5, 8 * time.Minute},
		{6, 0.5, 30 * time.Minute}, // capped
		{60, 0.5, 30 * time.Minute},
		{1, 0, 45 * time.Second},     // -25 %
		{1, 0.999, 75 * time.Second}, // about +25 %
		{0, 0.5, time.Minute},
	} {
		got := b.Delay(c.n, c.r)
		if d := got - c.want; d < -time.Second || d > time.Second {
			t.Errorf("Delay(%d, %v) = %v, want %v", c.n, c.r, got, c.want)
		}
	}
}

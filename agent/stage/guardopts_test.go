package stage

import (
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
)

// etcd's metrics are scraped every MetricsEvery, never faster than the
// guard reads, and every 3 s (the config's default) when unset.
func TestGuardMetricsEvery(t *testing.T) {
	for _, c := range []struct {
		every, interval, want time.Duration
	}{
		{0, 250 * time.Millisecond, 3 * time.Second},
		{3 * time.Second, 250 * time.Millisecond, 3 * time.Second},
		{500 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond},
		{500 * time.Millisecond, 2 * time.Second, 2 * time.Second},
	} {
		g := GuardOptions{MetricsEvery: c.every, Options: guard.Options{Interval: c.interval}}
		if got := g.metricsEvery(); got != c.want {
			t.Errorf("MetricsEvery %v, interval %v: %v, want %v", c.every, c.interval, got, c.want)
		}
	}
}

package stage

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
)

func TestForeignBaseline(t *testing.T) {
	for _, c := range []struct {
		foreign, usable, fresh bool
		want                   int
	}{
		{false, true, true, baselineRolling},
		{false, true, false, baselineLearn},
		{false, false, false, baselineLearn},
		{true, true, true, baselineRolling},
		{true, true, false, baselineStale},
		{true, false, false, baselineNone},
		{true, false, true, baselineNone}, // fresh but empty: nothing to adopt
	} {
		if got := foreignBaseline(c.foreign, c.usable, c.fresh); got != c.want {
			t.Errorf("foreignBaseline(foreign %v, usable %v, fresh %v) = %d, want %d", c.foreign, c.usable, c.fresh, got, c.want)
		}
	}
}

// A foreign window never learns (the transaction already writes: what it
// would learn is the transaction's load): it adopts a stale rolling
// baseline, and without any it runs unguarded and says why.
func TestPaceForeignNeverLearns(t *testing.T) {
	h := guard.Histogram{Bounds: []float64{0.001, 0.002, 0.004, math.Inf(1)}, Counts: []uint64{0, 100, 100, 100}}
	for _, c := range []struct {
		name    string
		rec     guard.Rolling
		want    string
		guarded bool
		log     string
	}{
		{"none", guard.Rolling{}, "none: no rolling baseline yet", false,
			"no rolling latency baseline yet: a foreign transaction's window runs without the latency guard"},
		{"stale", guard.Rolling{}.Add(time.Now().Add(-time.Hour), time.Minute, map[string]guard.Histogram{guard.MetricWALFsync: h}, -1, 30*time.Minute),
			"stale rolling, 1h0m0s old", true, "adopts the stale one rather than learn from its writes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			var logs lockedBuffer
			e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
			w := &watchingEtcd{e: e}
			e.opts.Baseline = &fakeBaseline{rec: c.rec}
			e.opts.Guard = GuardOptions{Enabled: true, Source: w,
				Options: guard.Options{LearnFor: 30 * time.Millisecond, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond}}
			end := paceForeign(e.stager(t, nil), context.Background())
			e.waitOpen(t)
			time.Sleep(60 * time.Millisecond) // a few guard intervals
			rep, err := end()
			if err != nil {
				t.Fatal(err)
			}
			if rep.Baseline != c.want || rep.Guarded != c.guarded {
				t.Errorf("baseline %q guarded %v, want %q %v", rep.Baseline, rep.Guarded, c.want, c.guarded)
			}
			w.mu.Lock()
			for i, n := range w.changed {
				if n == 0 {
					t.Errorf("etcd read %d before the window changed anything: the window learned", i)
				}
			}
			w.mu.Unlock()
			if !strings.Contains(logs.String(), c.log) {
				t.Errorf("log lacks %q:\n%s", c.log, logs.String())
			}
			e.assertUndone(t)
		})
	}
}

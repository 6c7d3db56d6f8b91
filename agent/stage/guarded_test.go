package stage

import (
	"context"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/systemd"
)

func TestRunWithGuardPacesBothUnits(t *testing.T) {
	e := newEnv(t)
	e.opts.Guard = GuardOptions{
		Enabled: true,
		Options: guard.Options{LearnFor: -1, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond,
			Baseline: guard.Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}},
			Config:   guard.Config{MinFreeze: 20 * time.Millisecond, MaxFreeze: 60 * time.Millisecond}},
		Source: &slowEtcd{},
	}
	s := e.stager(t, nil)
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		deadline := time.Now().Add(5 * time.Second)
		for e.sys.called("Freeze "+daemonUnit) < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Guarded || rep.Guard.Freezes < 2 || rep.Guard.ForcedThaws < 1 {
		t.Errorf("guard stats %+v", rep)
	}
	if e.sys.called("Freeze "+stagingUnit) < 2 {
		t.Errorf("staging unit not paced: %v", e.sys.calls)
	}
	e.assertUndone(t)
}

// watchingEtcd is a calm etcd that records, at each read, what the stager
// had changed by then.
type watchingEtcd struct {
	mu      sync.Mutex
	n       uint64
	e       *env
	changed []int // changes seen at each read
}

func (w *watchingEtcd) Read(context.Context) (guard.Reading, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.e.sched.mu.Lock()
	changes := len(w.e.sched.applied)
	w.e.sched.mu.Unlock()
	changes += w.e.sys.called("SetRuntime") + w.e.sys.called("Reload") + w.e.sys.called("Restart") + len(w.e.ostree.conf)
	w.changed = append(w.changed, changes)
	w.n += 50
	h := guard.Histogram{Bounds: []float64{0.001, 0.002, 0.004, 1e308}, Counts: []uint64{0, w.n, w.n, w.n}}
	return guard.Reading{At: time.Now(), Hists: map[string]guard.Histogram{guard.MetricWALFsync: h}}, nil
}

func TestRunLearnsBeforeChangingAnything(t *testing.T) {
	e := newEnv(t)
	w := &watchingEtcd{e: e}
	e.opts.Guard = GuardOptions{Enabled: true, Source: w,
		Options: guard.Options{LearnFor: 30 * time.Millisecond, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond}}
	rep, err := e.stager(t, nil).Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.changed) < 2 || w.changed[0] != 0 || w.changed[1] != 0 {
		t.Errorf("changes seen by the learning reads %v, want none: the baseline must be learned before the window opens", w.changed)
	}
	if rep.Baseline != "learned before the window" || rep.Setup <= 0 {
		t.Errorf("report baseline %q setup %s", rep.Baseline, rep.Setup)
	}
	e.assertUndone(t)
}

type fakeBaseline struct {
	mu             sync.Mutex
	rec            guard.Rolling
	paused, resume int
}

func (f *fakeBaseline) Record() guard.Rolling { return f.rec }
func (f *fakeBaseline) Pause() func() {
	f.mu.Lock()
	f.paused++
	f.mu.Unlock()
	return func() { f.mu.Lock(); f.resume++; f.mu.Unlock() }
}

func TestRunUsesAFreshRollingBaseline(t *testing.T) {
	h := guard.Histogram{Bounds: []float64{0.001, 0.002, 0.004, math.Inf(1)}, Counts: []uint64{0, 100, 100, 100}}
	for _, c := range []struct {
		name string
		age  time.Duration
		want string
	}{
		{"fresh", 2 * time.Minute, "rolling, 2m0s old"},
		{"stale", time.Hour, "learned before the window"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			w := &watchingEtcd{e: e}
			rec := guard.Rolling{}.Add(time.Now().Add(-c.age), time.Minute, map[string]guard.Histogram{guard.MetricWALFsync: h}, -1, 30*time.Minute)
			fb := &fakeBaseline{rec: rec}
			e.opts.Baseline = fb
			e.opts.Guard = GuardOptions{Enabled: true, Source: w,
				Options: guard.Options{LearnFor: 30 * time.Millisecond, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond}}
			rep, err := e.stager(t, nil).Run(context.Background(), argv)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Baseline != c.want {
				t.Errorf("baseline source %q, want %q", rep.Baseline, c.want)
			}
			if fb.paused != 1 || fb.resume != 1 {
				t.Errorf("rolling baseline paused %d, resumed %d times; want once each", fb.paused, fb.resume)
			}
		})
	}
}

func TestRunAutoWriteRatePacesBothUnits(t *testing.T) {
	e := newEnv(t)
	ioMax := e.autoRate(t)
	e.opts.WriteRate = guard.RateConfig{Min: 1_000_000} // below the default floor (the start rate)
	s := e.stager(t, fakeDaemon{idle: false})
	var staged string
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			b, _ := os.ReadFile(ioMax)
			// etcd is slow: the rate is cut from the 4 MB/s start.
			if staged = string(b); staged != "" && staged != "252:16 wbps=4000000 wiops=244" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if staged != "252:16 wbps=2000000 wiops=122" {
		t.Errorf("staging unit's io.max %q, want the cut rate 252:16 wbps=2000000 wiops=122", staged)
	}
	// The daemon's IOPS cap follows its rate (and was put back: undone).
	if e.sys.called("SetRuntime "+daemonUnit+" IOWriteBandwidthMax,IOWriteIOPSMax") == 0 {
		t.Errorf("the daemon's IOPS cap never followed the rate: %v", e.sys.calls)
	}
	// The daemon through systemd (journaled); the staging unit never, so
	// no control file outlives it.
	if e.sys.called("SetRuntime "+daemonUnit+" IOWriteBandwidthMax") == 0 || e.sys.called("SetRuntime "+stagingUnit) != 0 {
		t.Errorf("write rate calls: %v", e.sys.calls)
	}
	if rep.Guard.Rate == 0 || rep.Guard.RateCuts == 0 {
		t.Errorf("report has no rate cut: %+v", rep.Guard)
	}
	// Setting the rate reads the unit's cgroup, not its whole status (in
	// the guest that read was 5 % of stage-once's CPU).
	if n := e.sys.fullReads[stagingUnit]; n > 1 {
		t.Errorf("%d full status reads of the staging unit, want 1 (the undo checks it is not frozen)", n)
	}
	e.assertUndone(t)
}

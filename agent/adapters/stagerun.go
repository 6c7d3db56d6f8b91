package adapters

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/stage"
)

// lazyStage is what Stager and BootcStager share: the stage.Stager, built
// on first use (it needs systemd's bus), and how the last staging went.
type lazyStage struct {
	mu   sync.Mutex
	s    *stage.Stager
	last *engine.StagingReport
}

// LastStaging is how the last staging went (engine.StagingReporter), nil
// before the first.
func (l *lazyStage) LastStaging() *engine.StagingReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// stager returns the stage.Stager, building it with build the first time.
func (l *lazyStage) stager(ctx context.Context, build func(context.Context) (*stage.Stager, error)) (*stage.Stager, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s == nil {
		s, err := build(ctx)
		if err != nil {
			return nil, fmt.Errorf("setting up staging: %w", err)
		}
		l.s = s
	}
	return l.s, nil
}

// record keeps how a staging went (rep, err) for LastStaging.
func (l *lazyStage) record(rep stage.Report, err error) {
	r := &engine.StagingReport{At: time.Now(), Seconds: rep.Duration.Seconds(), OK: err == nil, Disks: rep.Disks,
		Guarded: rep.Guarded, Freezes: rep.Guard.Freezes, ForcedThaws: rep.Guard.ForcedThaws, Frozen: rep.Guard.Frozen.Seconds(),
		Baseline: rep.Baseline, Setup: rep.Setup.Seconds(), WriteRate: rep.Guard.Rate, RateCuts: rep.Guard.RateCuts,
		Pacing: rep.Pacing}
	if err != nil {
		r.Error = err.Error()
	}
	l.mu.Lock()
	l.last = r
	l.mu.Unlock()
}

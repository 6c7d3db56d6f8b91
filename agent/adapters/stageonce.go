package adapters

import (
	"context"
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/state"
)

// StageOnce stages t for `update-agent stage-once` through the daemon's
// own staging (Stage: the same request and the same checks of what got
// staged, such as an update graph's stream), with the staging's report.
// No engine follows stage-once, so what the engine discards after a
// staging (a release set aside, engine.PulledRelease) is discarded here.
func (a *Stager) StageOnce(ctx context.Context, t state.Target) (stage.Report, error) {
	rep, err := a.stage(ctx, t)
	return rep, discardSetAside(ctx, a.Client, err)
}

// StageOnce is Stager's, without a report (no transient unit, no guard).
func (p PlainStager) StageOnce(ctx context.Context, t state.Target) (stage.Report, error) {
	return stage.Report{}, discardSetAside(ctx, p.Client, p.Stage(ctx, t))
}

// discardSetAside discards the staged deployment when err sets its release
// aside, as the engine does on such a staging's end (engine.PulledRelease:
// ActCleanup, rpm-ostree cleanup -p), so that no reboot or finalize
// applies it; err is kept, and says whether the discard worked.
func discardSetAside(ctx context.Context, c *rpmostree.Client, err error) error {
	var p engine.PulledRelease
	if !errors.As(err, &p) {
		return err
	}
	if cerr := c.Cleanup(ctx); cerr != nil {
		return fmt.Errorf("%w; discarding its staged deployment: %w", err, cerr)
	}
	return fmt.Errorf("%w; discarded its staged deployment", err)
}

package adapters

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/state"
)

// BootcStager is engine.Stager for bootc: `bootc upgrade --download-only`
// (bootc.Client.StageArgv) runs in the transient unit under the I/O policy,
// paced by the guard, as rpm-ostree's staging does. bootc has no daemon:
// the writer is the staging unit itself.
type BootcStager struct {
	Client *bootc.Client
	// Make builds the stage.Stager on first use (it needs systemd's bus).
	Make func(ctx context.Context) (*stage.Stager, error)
	// Done, when set, is told how each staging went (metrics).
	Done func(stage.Report, error)

	mu   sync.Mutex
	s    *stage.Stager
	last *engine.StagingReport
}

// LastStaging is how the last staging went (engine.StagingReporter).
func (a *BootcStager) LastStaging() *engine.StagingReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

func (a *BootcStager) get(ctx context.Context) (*stage.Stager, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.s == nil {
		s, err := a.Make(ctx)
		if err != nil {
			return nil, fmt.Errorf("setting up staging: %w", err)
		}
		a.s = s
	}
	return a.s, nil
}

// Stage stages the newest image download-only and checks it is t.
func (a *BootcStager) Stage(ctx context.Context, t state.Target) error {
	s, err := a.get(ctx)
	if err != nil {
		return err
	}
	rep, err := s.Run(ctx, a.Client.StageArgv())
	if a.Done != nil {
		a.Done(rep, err)
	}
	r := &engine.StagingReport{At: time.Now(), Seconds: rep.Duration.Seconds(), OK: err == nil, Disks: rep.Disks,
		Guarded: rep.Guarded, Freezes: rep.Guard.Freezes, ForcedThaws: rep.Guard.ForcedThaws, Frozen: rep.Guard.Frozen.Seconds(),
		Baseline: rep.Baseline, Setup: rep.Setup.Seconds(), WriteRate: rep.Guard.Rate, RateCuts: rep.Guard.RateCuts}
	if err != nil {
		r.Error = err.Error()
	}
	a.mu.Lock()
	a.last = r
	a.mu.Unlock()
	if err != nil {
		return err
	}
	return stagedLocked(ctx, a.Client, t)
}

// Recover restores what an interrupted staging left behind.
func (a *BootcStager) Recover(ctx context.Context) error {
	s, err := a.get(ctx)
	if err != nil {
		return err
	}
	return s.Recover(ctx)
}

// errStagedOther: bootc follows the image's tag, so what it stages is the
// newest image, which may be newer than the one the check offered.
var errStagedOther = errors.New("bootc staged another image than the one offered (pushed meanwhile); the next check offers it")

// stagedLocked checks that staging left t staged and download-only.
func stagedLocked(ctx context.Context, c *bootc.Client, t state.Target) error {
	h, err := c.Status(ctx)
	if err != nil {
		return fmt.Errorf("staging %s: %w", t.Checksum, err)
	}
	s := h.Status.Staged
	switch {
	case s == nil:
		return fmt.Errorf("staging %s: %w", t.Checksum, errNothingStaged)
	case !s.DownloadOnly:
		return fmt.Errorf("staging %s: the staged deployment is not download-only", t.Checksum)
	case s.Digest() != t.Checksum:
		return fmt.Errorf("staging %s: staged %s: %w", t.Checksum, s.Digest(), errStagedOther)
	}
	return nil
}

// PlainBootcStager runs the staging command directly: no transient unit,
// no I/O policy, no guard. For hosts without systemd (tests).
type PlainBootcStager struct{ Client *bootc.Client }

// Stage runs `bootc upgrade --download-only` and checks what it staged.
func (p PlainBootcStager) Stage(ctx context.Context, t state.Target) error {
	argv := p.Client.StageArgv()
	r := p.Client.Runner
	if _, err := r.Run(ctx, "staging OS update", argv...); err != nil {
		return fmt.Errorf("staging %s: %w", t.Checksum, err)
	}
	return stagedLocked(ctx, p.Client, t)
}

// Recover: nothing to undo without a policy.
func (PlainBootcStager) Recover(context.Context) error { return nil }

package adapters

import (
	"context"
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/bootc"
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

	lazyStage
}

// Stage stages the newest image download-only and checks it is t.
func (a *BootcStager) Stage(ctx context.Context, t state.Target) error {
	s, err := a.stager(ctx, a.Make)
	if err != nil {
		return err
	}
	rep, err := s.Run(ctx, a.Client.StageArgv())
	if a.Done != nil {
		a.Done(rep, err)
	}
	a.record(rep, err)
	if err != nil {
		return err
	}
	return stagedLocked(ctx, a.Client, t)
}

// Recover restores what an interrupted staging left behind.
func (a *BootcStager) Recover(ctx context.Context) error {
	s, err := a.stager(ctx, a.Make)
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
		return fmt.Errorf("staging %s: %w", t.Checksum, ErrNothingStaged)
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

package adapters

import (
	"context"
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/agent/txn"
)

// Stager is engine.Stager over agent/stage: the staging command
// (rpmostree.Client.StageArgv, always --lock-finalization) runs in a
// transient unit under the I/O policy, paced by the guard.
type Stager struct {
	Client *rpmostree.Client
	// Make builds the stage.Stager on first use (it needs systemd's bus).
	Make func(ctx context.Context) (*stage.Stager, error)
	// Image, when set, is rebased to (updates.source = "image").
	Image string
	// Exact (updates.source = "graph"): the target names the release to
	// deploy (a commit, or an image digest), never "what the ref or tag
	// points at now".
	Exact bool
	// AllowDowngrade lets the staged tree be older than the current one
	// (updates.allow_downgrade); otherwise rpm-ostree refuses it.
	AllowDowngrade bool
	// Override (Exact) is the booted status override file
	// (rpmostree.BootedOverrideFile under the root), "" for none.
	Override string
	// Done, when set, is told how each staging went (metrics).
	Done func(stage.Report, error)
	// Txn, when set, clears rpm-ostreed of an earlier agent process's
	// transaction before each staging and at start, waits for somebody
	// else's, and records each staging transaction.
	Txn *txn.Settler

	lazyStage
}

// Request is what to stage for t: a rebase to the configured image, an
// upgrade for a container origin (its target is a digest), else the exact
// commit the check found (deploy revision=), so a commit published meanwhile
// is not staged unchecked.
func Request(booted rpmostree.Deployment, image string, t state.Target) rpmostree.StageRequest {
	switch {
	case image != "":
		return rpmostree.StageRequest{Kind: rpmostree.StageRebase, Ref: image}
	case booted.IsContainer():
		return rpmostree.StageRequest{Kind: rpmostree.StageUpgrade}
	}
	return rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: t.Checksum}
}

// ExactRequest stages exactly t over st, as zincati stages an update
// graph's release (src/rpm_ostree/actor.rs, cli_deploy.rs): a commit is
// deployed (deploy revision=, skipping the branch check, since the release
// need not be in the history of the origin's ref); an OCI release is
// deployed by digest when the local deployment (the staged one, else the
// booted) follows its image at the stream's tag, else rebased to that tag
// at the digest (graph.RebaseRef). A target without its image (recorded
// before it was kept) is deployed by digest.
func ExactRequest(st *rpmostree.Status, t state.Target) (rpmostree.StageRequest, error) {
	deploy := rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: t.Checksum, SkipBranchCheck: true}
	if t.Image == "" {
		return deploy, nil
	}
	local, ok := st.Staged()
	if !ok {
		if local, ok = st.Booted(); !ok {
			return deploy, fmt.Errorf("staging %s: rpm-ostree status shows no booted deployment", t.Image)
		}
	}
	ref, err := graph.RebaseRef(local.ContainerImageReference, t.Image, t.Stream)
	if err != nil {
		return deploy, fmt.Errorf("staging %s: %w", t.Image, err)
	}
	if ref == "" {
		return deploy, nil
	}
	return rpmostree.StageRequest{Kind: rpmostree.StageRebase, Ref: ref, Revision: t.Checksum}, nil
}

// exactRequest is ExactRequest over st with the booted status override
// (rpmostree.WithBootedOverride) at override applied.
func exactRequest(st *rpmostree.Status, override string, t state.Target) (rpmostree.StageRequest, error) {
	st, err := rpmostree.WithBootedOverride(st, override)
	if err != nil {
		return rpmostree.StageRequest{}, fmt.Errorf("staging %s: %w", t.Checksum, err)
	}
	return ExactRequest(st, t)
}

// Stage stages t and checks that a new staged deployment came of it: when
// rpm-ostree finds nothing new it does not lock anything.
func (a *Stager) Stage(ctx context.Context, t state.Target) error {
	_, err := a.stage(ctx, t)
	return err
}

// stage is Stage with the staging's report (StageOnce prints it).
func (a *Stager) stage(ctx context.Context, t state.Target) (stage.Report, error) {
	s, err := a.stager(ctx, a.Make)
	if err != nil {
		return stage.Report{}, err
	}
	before, err := a.Client.Status(ctx)
	if err != nil {
		return stage.Report{}, fmt.Errorf("staging %s: %w", t.Checksum, err)
	}
	booted, _ := before.Booted()
	req := Request(booted, a.Image, t)
	if a.Exact {
		if req, err = exactRequest(before, a.Override, t); err != nil {
			return stage.Report{}, err
		}
	}
	req.AllowDowngrade = a.AllowDowngrade
	rep, err := a.run(ctx, s, req)
	if err != nil {
		return rep, a.busyAfter(ctx, err) // agent/stage's errors say "staging"; the engine knows the target
	}
	after, err := a.Client.Status(ctx)
	if err != nil {
		return rep, fmt.Errorf("staging %s: %w", t.Checksum, err)
	}
	if !rpmostree.StagedChanged(before, after) {
		return rep, fmt.Errorf("staging %s: %w", t.Checksum, ErrNothingStaged)
	}
	if a.Exact {
		return rep, exactStaged(ctx, a.Client, after, t)
	}
	return rep, nil
}

// ErrNothingStaged: the staging command left no new staged deployment.
var ErrNothingStaged = errors.New("rpm-ostree made no new staged deployment (nothing new, or already staged and not re-locked)")

// errStagedNotChosen: an exact staging (an update graph's release) left
// another release staged than the one chosen.
var errStagedNotChosen = errors.New("rpm-ostree staged another release than the one chosen")

// exactStaged checks that the staged deployment in st is t, on t's stream.
// A graph's release is chosen for its edges (and denylist): whatever else
// got staged was not, so it is discarded rather than adopted. One on
// another stream is a graph.WrongStreamError, for the engine to set aside.
func exactStaged(ctx context.Context, c *rpmostree.Client, st *rpmostree.Status, t state.Target) error {
	s, ok := st.Staged()
	if !ok {
		return fmt.Errorf("staging %s: %w", t.Checksum, ErrNothingStaged)
	}
	if s.Target() == t.Checksum {
		if w := graph.ConfirmStream(s, t.Stream); w != nil {
			// The engine sets it aside and discards it (engine.PulledRelease).
			return fmt.Errorf("staging %s: %w", t.Checksum, w)
		}
		return nil
	}
	err := fmt.Errorf("staging %s: %w (%s)", t.Checksum, errStagedNotChosen, s.Target())
	if cerr := c.Cleanup(ctx); cerr != nil {
		return fmt.Errorf("%w; discarding it: %w", err, cerr)
	}
	return fmt.Errorf("%w; discarded it", err)
}

// Run stages req as it is, without checking what came of it (stage-once).
func (a *Stager) Run(ctx context.Context, req rpmostree.StageRequest) (stage.Report, error) {
	s, err := a.stager(ctx, a.Make)
	if err != nil {
		return stage.Report{}, err
	}
	return a.run(ctx, s, req)
}

func (a *Stager) run(ctx context.Context, s *stage.Stager, req rpmostree.StageRequest) (stage.Report, error) {
	argv := a.Client.StageArgv(req)
	end, err := settle(ctx, a.Txn, argv)
	if err != nil {
		return stage.Report{}, err
	}
	rep, err := s.Run(ctx, argv)
	end()
	if a.Done != nil {
		a.Done(rep, err)
	}
	a.record(rep, err)
	return rep, err
}

// busyAfter: the staging command runs in a unit, so its "Transaction in
// progress" is in that unit's journal, not here. A failed staging that
// leaves rpm-ostreed running a transaction (it can only be somebody
// else's: Settle found it idle) is taken for one refused as busy.
func (a *Stager) busyAfter(ctx context.Context, err error) error {
	if a.Txn == nil || errors.Is(err, engine.ErrBusy) || ctx.Err() != nil {
		return err
	}
	if st, serr := a.Client.Status(ctx); serr == nil && st.Transaction != nil {
		return fmt.Errorf("%w (rpm-ostree now runs a %s transaction: %w)", err, st.Transaction.Method, engine.ErrBusy)
	}
	return err
}

// settle clears the way for argv (txn.Settler.Settle) and records it; end
// removes the record once argv has run. A nil t does neither.
func settle(ctx context.Context, t *txn.Settler, argv []string) (end func(), err error) {
	if t == nil {
		return func() {}, nil
	}
	if err := t.Settle(ctx); err != nil {
		return nil, fmt.Errorf("staging: %w", mapBusy(err))
	}
	return t.Begin(argv)
}

// Recover undoes what an interrupted staging left behind: the policy, then
// a transaction of it still running in rpm-ostreed.
func (a *Stager) Recover(ctx context.Context) error {
	s, err := a.stager(ctx, a.Make)
	if err != nil {
		return err
	}
	if err := s.Recover(ctx); err != nil {
		return err
	}
	if a.Txn != nil {
		return a.Txn.Recover(ctx)
	}
	return nil
}

// PaceForeign opens the staging window around a transaction somebody else
// started, until ended is closed (stage.Stager.PaceForeign): companion
// mode.
func (a *Stager) PaceForeign(ctx context.Context, t stage.Foreign, ended <-chan struct{}) (stage.Report, error) {
	s, err := a.stager(ctx, a.Make)
	if err != nil {
		return stage.Report{}, err
	}
	return s.PaceForeign(ctx, t, ended)
}

// PlainStager stages with the rpm-ostree CLI directly: no transient unit,
// no I/O policy, no guard. For hosts without systemd (tests); the daemon
// never uses it.
type PlainStager struct {
	Client         *rpmostree.Client
	Image          string
	AllowDowngrade bool
	// Exact, Override: as Stager's.
	Exact    bool
	Override string
	// Txn: as Stager's.
	Txn *txn.Settler
}

// Stage runs the staging command and checks it staged something.
func (p PlainStager) Stage(ctx context.Context, t state.Target) error {
	st, err := p.Client.Status(ctx)
	if err != nil {
		return fmt.Errorf("staging %s: %w", t.Checksum, err)
	}
	booted, _ := st.Booted()
	req := Request(booted, p.Image, t)
	if p.Exact {
		if req, err = exactRequest(st, p.Override, t); err != nil {
			return err
		}
	}
	req.AllowDowngrade = p.AllowDowngrade
	end, err := settle(ctx, p.Txn, p.Client.StageArgv(req))
	if err != nil {
		return err
	}
	res, err := p.Client.Stage(ctx, req)
	end()
	if err != nil {
		return mapBusy(err) // "staging <request>: ..."
	}
	if !res.Changed {
		return fmt.Errorf("staging %s: %w", t.Checksum, ErrNothingStaged)
	}
	if p.Exact {
		after, err := p.Client.Status(ctx)
		if err != nil {
			return fmt.Errorf("staging %s: %w", t.Checksum, err)
		}
		return exactStaged(ctx, p.Client, after, t)
	}
	return nil
}

// Recover cancels what is left of an earlier process's staging transaction.
func (p PlainStager) Recover(ctx context.Context) error {
	if p.Txn == nil {
		return nil
	}
	return p.Txn.Recover(ctx)
}

// DaemonIdle tells agent/stage whether rpm-ostreed runs a transaction (it
// is restarted to take the policy only when idle).
type DaemonIdle struct{ Client *rpmostree.Client }

// Idle reports whether rpm-ostree's status shows no transaction.
func (d DaemonIdle) Idle(ctx context.Context) (bool, error) {
	st, err := d.Client.Status(ctx)
	if err != nil {
		return false, err
	}
	return st.Transaction == nil, nil
}

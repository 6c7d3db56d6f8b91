package standin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// store keeps the deployments: the stand-in's own records under
// RPMOSTREE_STANDIN_SYSROOT (fileStore, for hosts that did not boot from
// ostree), or the booted ostree sysroot itself (sysrootStore).
type store interface {
	// repo is the host repo the daemon pulls into.
	repo() string
	// load returns the booted and rollback deployments and the staged one
	// with its finalization lock, if any.
	load(ctx context.Context) (Deployments, *Staged, error)
	// stage makes nd (pulled into repo) the staged deployment, replacing
	// old, locked for finalization if asked; it returns nd with its serial.
	stage(ctx context.Context, nd Dep, deps Deployments, old *Staged, locked bool) (Dep, error)
	// unlock removes the staged deployment's finalization lock; lock
	// puts it back (bootc upgrade --download-only of what is staged).
	unlock(ctx context.Context, s Staged) error
	lock(ctx context.Context, s Staged) error
	dropStaged(ctx context.Context, s Staged) error
	dropRollback(ctx context.Context, deps Deployments) error
}

// fileStore: checkouts under the sysroot, the booted/rollback record beside
// them, the staged record and its lock in the run dir (lost on a reboot).
type fileStore struct {
	cfg    Config
	ostree ostreeCLI
}

// newFileStore discards what a reboot without finalization left behind
// (the checkout of a staged deployment whose record vanished with /run).
func newFileStore(cfg Config, ot ostreeCLI, log *slog.Logger) (*fileStore, error) {
	deps, err := cfg.loadDeployments()
	if err != nil {
		return nil, err
	}
	staged, err := cfg.loadStaged()
	if err != nil {
		return nil, err
	}
	var sd *Dep
	if staged != nil {
		if _, err := os.Stat(cfg.checkoutDir(staged.Deployment)); err != nil {
			log.Warn("staged deployment has no checkout; dropping it", "id", staged.Deployment.ID())
			if err := os.Remove(cfg.stagedFile()); err != nil {
				return nil, err
			}
		} else {
			sd = &staged.Deployment
		}
	}
	if err := cfg.removeOrphans(&deps.Booted, deps.Rollback, sd); err != nil {
		return nil, fmt.Errorf("removing orphaned deployments: %w", err)
	}
	return &fileStore{cfg: cfg, ostree: ot}, nil
}

func (f *fileStore) repo() string { return f.cfg.repo() }

func (f *fileStore) load(context.Context) (Deployments, *Staged, error) {
	deps, err := f.cfg.loadDeployments()
	if err != nil {
		return deps, nil, err
	}
	staged, err := f.cfg.loadStaged()
	return deps, staged, err
}

func (f *fileStore) stage(ctx context.Context, nd Dep, deps Deployments, old *Staged, locked bool) (Dep, error) {
	var prev *Dep
	if old != nil {
		prev = &old.Deployment
	}
	nd.Serial = nextSerial(nd.Checksum, &deps.Booted, deps.Rollback)
	dir := f.cfg.checkoutDir(nd)
	if prev != nil && f.cfg.checkoutDir(*prev) == dir {
		nd.Serial++ // never write over the checkout being replaced
		dir = f.cfg.checkoutDir(nd)
	}
	tmp := filepath.Join(filepath.Dir(dir), ".tmp-"+filepath.Base(dir))
	_ = removeTree(tmp)
	userMode := f.ostree.isUserMode(ctx, f.repo())
	if err := f.ostree.checkout(ctx, f.repo(), nd.Checksum, tmp, userMode); err != nil {
		_ = removeTree(tmp)
		return nd, err
	}
	if err := ctx.Err(); err != nil {
		_ = removeTree(tmp)
		return nd, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nd, err
	}
	if err := writeJSON(f.cfg.stagedFile(), Staged{Deployment: nd, Locked: locked}); err != nil {
		return nd, err
	}
	if prev != nil {
		_ = removeTree(f.cfg.checkoutDir(*prev))
	}
	return nd, nil
}

func (f *fileStore) unlock(_ context.Context, s Staged) error {
	s.Locked = false
	return writeJSON(f.cfg.stagedFile(), s)
}

func (f *fileStore) lock(_ context.Context, s Staged) error {
	s.Locked = true
	return writeJSON(f.cfg.stagedFile(), s)
}

func (f *fileStore) dropStaged(_ context.Context, s Staged) error {
	if err := os.Remove(f.cfg.stagedFile()); err != nil {
		return err
	}
	return removeTree(f.cfg.checkoutDir(s.Deployment))
}

func (f *fileStore) dropRollback(_ context.Context, deps Deployments) error {
	rb := deps.Rollback
	deps.Rollback = nil
	if err := writeJSON(f.cfg.deploymentsFile(), deps); err != nil {
		return err
	}
	return removeTree(f.cfg.checkoutDir(*rb))
}

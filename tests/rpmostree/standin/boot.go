package standin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/update-agent/update-agent/agent/oplog"
)

// InitOptions set up a sysroot, as installing a host would.
type InitOptions struct {
	OSName string
	Remote string // remote name, e.g. "fedora"
	URL    string // file:// URL of the update repo
	Ref    string // booted ref in that repo
	// PerObjectFsync sets core.per-object-fsync in the host repo: each object
	// is fsynced as written instead of one syncfs at the end.
	PerObjectFsync bool
}

// Init creates the host repo, adds the remote, pulls Ref and deploys it as
// the booted deployment.
func Init(ctx context.Context, cfg Config, o InitOptions, log *slog.Logger) error {
	if cfg.RealSysroot {
		return initSysroot(ctx, cfg, o, log)
	}
	if _, err := os.Stat(cfg.deploymentsFile()); err == nil {
		return fmt.Errorf("%s exists: sysroot already initialized", cfg.deploymentsFile())
	}
	if o.OSName == "" || o.Remote == "" || o.URL == "" || o.Ref == "" {
		return errors.New("init needs an osname, a remote, its URL and a ref")
	}
	ot := newOstree(cfg, oplog.Runner{Log: log})
	repo := cfg.repo()
	if err := os.MkdirAll(repo, 0o755); err != nil {
		return err
	}
	if _, err := ot.run(ctx, "creating host repo", "init", "--repo="+repo, "--mode="+repoMode()); err != nil {
		return err
	}
	fsync := "false"
	if o.PerObjectFsync {
		fsync = "true"
	}
	if _, err := ot.run(ctx, "configuring fsync", "config", "--repo="+repo, "set", "core.per-object-fsync", fsync); err != nil {
		return err
	}
	if _, err := ot.run(ctx, "adding remote", "remote", "add", "--repo="+repo, "--no-gpg-verify", o.Remote, o.URL); err != nil {
		return err
	}
	src, err := ot.remotePath(ctx, repo, o.Remote)
	if err != nil {
		return err
	}
	csum, err := ot.pullRef(ctx, repo, src, o.Remote, o.Ref)
	if err != nil {
		return err
	}
	v, ts, err := ot.commitInfo(ctx, repo, csum)
	if err != nil {
		return err
	}
	dep := Dep{OSName: o.OSName, Checksum: csum, Origin: o.Remote + ":" + o.Ref, Version: v, Timestamp: ts}
	if err := os.MkdirAll(cfg.deployDir(o.OSName), 0o755); err != nil {
		return err
	}
	if err := ot.checkout(ctx, repo, csum, cfg.checkoutDir(dep), ot.isUserMode(ctx, repo)); err != nil {
		return err
	}
	return writeJSON(cfg.deploymentsFile(), Deployments{Booted: dep})
}

// FinalizeStaged is what the shutdown unit runs (like `ostree admin
// finalize-staged` from ostree-finalize-staged.service): an unlocked staged
// deployment becomes the one booted next, the old booted one the rollback.
// A locked one stays put and dies with /run.
func FinalizeStaged(cfg Config, log *slog.Logger) error {
	if cfg.RealSysroot {
		log.Info("real ostree sysroot: ostree-finalize-staged.service finalizes, nothing to do")
		return nil
	}
	staged, err := cfg.loadStaged()
	if err != nil {
		return err
	}
	if staged == nil {
		log.Info("No deployment staged for finalization")
		return nil
	}
	if staged.Locked {
		log.Info("Not finalizing; deployment is locked for finalization", "id", staged.Deployment.ID())
		return nil
	}
	deps, err := cfg.loadDeployments()
	if err != nil {
		return err
	}
	oldRollback := deps.Rollback
	prevBooted := deps.Booted
	deps.Booted, deps.Rollback = staged.Deployment, &prevBooted
	if err := writeJSON(cfg.deploymentsFile(), deps); err != nil {
		return err
	}
	if err := os.Remove(cfg.stagedFile()); err != nil {
		return err
	}
	if oldRollback != nil && cfg.checkoutDir(*oldRollback) != cfg.checkoutDir(deps.Booted) {
		if err := removeTree(cfg.checkoutDir(*oldRollback)); err != nil {
			return err
		}
	}
	log.Info("Finalized staged deployment", "id", staged.Deployment.ID(), "rollback", prevBooted.ID())
	return nil
}

// initSysroot points the booted deployment of a real ostree sysroot at the
// update remote: its origin becomes REMOTE:REF, so upgrades follow that
// ref. What is booted stays as it is; the first upgrade stages REF's tip.
func initSysroot(ctx context.Context, cfg Config, o InitOptions, log *slog.Logger) error {
	if o.Remote == "" || o.URL == "" || o.Ref == "" {
		return errors.New("init needs a remote, its URL and a ref")
	}
	ot := newOstree(cfg, oplog.Runner{Log: log})
	fsync := "false"
	if o.PerObjectFsync {
		fsync = "true"
	}
	if _, err := ot.run(ctx, "configuring fsync", "config", "--repo="+sysrootRepo, "set", "core.per-object-fsync", fsync); err != nil {
		return err
	}
	if _, err := ot.run(ctx, "setting the booted deployment's origin", "admin", "set-origin",
		"--set=gpg-verify=false", o.Remote, o.URL, o.Ref); err != nil {
		return err
	}
	src, err := ot.remotePath(ctx, sysrootRepo, o.Remote)
	if err != nil {
		return err
	}
	_, err = ot.pullRef(ctx, sysrootRepo, src, o.Remote, o.Ref)
	return err
}

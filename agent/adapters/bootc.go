package adapters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// BootcOS is engine.OS over the bootc CLI (updates.backend = "bootc"), for
// image-mode hosts. Deployments are identified by their image digest.
// Staging is BootcStager's (upgrade --download-only: locked); finalize is
// `upgrade --from-downloaded --apply`.
type BootcOS struct {
	Client *bootc.Client
	// RpmOstree discards a staged deployment (`cleanup -p`): bootc has no
	// verb for that, and the engine must never leave an unlocked staged
	// deployment for an unplanned reboot to apply. Fedora, CentOS and RHEL
	// bootc images ship rpm-ostree on the same sysroot.
	RpmOstree *rpmostree.Client
	// ApplyWait is how long `--apply` may take to fail before its reboot
	// is taken as under way (a successful --apply never returns).
	ApplyWait time.Duration
}

// DefaultApplyWait bounds a finalize: unlocking takes the sysroot lock
// (another bootc may hold it) and then starts the reboot.
const DefaultApplyWait = 2 * time.Minute

func bootcDeployment(e *bootc.BootEntry) engine.Deployment {
	return engine.Deployment{Checksum: e.Digest(), Version: e.Version()}
}

var errNotBootc = errors.New("bootc status shows no booted container image (not an image-mode host: use updates.backend = \"rpm-ostree\")")

func (o BootcOS) host(ctx context.Context) (*bootc.Host, error) {
	h, err := o.Client.Status(ctx)
	if err != nil {
		return nil, err
	}
	if !h.Managed() {
		return nil, errNotBootc
	}
	return h, nil
}

// Status reads the booted and staged deployments.
func (o BootcOS) Status(ctx context.Context) (engine.OSStatus, error) {
	h, err := o.host(ctx)
	if err != nil {
		return engine.OSStatus{}, err
	}
	s := engine.OSStatus{Booted: bootcDeployment(h.Status.Booted)}
	if h.Status.Staged != nil {
		sd := bootcDeployment(h.Status.Staged)
		// downloadOnly is libostree's finalization lock as bootc reads it.
		sd.Unlocked = !h.Status.Staged.DownloadOnly
		s.Staged = &sd
	}
	return s, nil
}

// Check asks bootc for an update (`upgrade --check`), completed from status
// (BootcTarget).
func (o BootcOS) Check(ctx context.Context) (*state.Target, error) {
	r, err := o.Client.Check(ctx)
	if err != nil {
		return nil, err
	}
	if r.Available {
		return BootcTarget(r, nil), nil
	}
	h, err := o.host(ctx)
	if err != nil {
		return nil, fmt.Errorf("checking for OS updates: %w", err)
	}
	return BootcTarget(r, h), nil
}

// BootcTarget decides the update from `upgrade --check` and status. The
// check says "No changes" for an image already in the host's store: one
// staged (then it is the update), or one downloaded and then lost with an
// unplanned reboot (the booted entry's cachedUpdate still names it).
func BootcTarget(r bootc.CheckResult, h *bootc.Host) *state.Target {
	if r.Available {
		return &state.Target{Checksum: r.Digest, Version: r.Version}
	}
	if h == nil || h.Status.Booted == nil {
		return nil
	}
	booted := h.Status.Booted.Digest()
	if s := h.Status.Staged; s.Digest() != "" && s.Digest() != booted {
		return &state.Target{Checksum: s.Digest(), Version: s.Version()}
	}
	if c := h.Status.Booted.CachedUpdate; c != nil && c.ImageDigest != "" && c.ImageDigest != booted {
		return &state.Target{Checksum: c.ImageDigest, Version: c.Version}
	}
	return nil
}

// Finalize applies the staged deployment if it is digest and still
// download-only: `upgrade --from-downloaded` unlocks whatever is staged,
// so the digest is checked here first.
func (o BootcOS) Finalize(ctx context.Context, digest string) error {
	h, err := o.host(ctx)
	if err != nil {
		return fmt.Errorf("finalizing %s: %w", digest, err)
	}
	s := h.Status.Staged
	switch {
	case s == nil:
		return fmt.Errorf("finalizing %s: %w", digest, engine.ErrNoStagedDeployment)
	case s.Digest() != digest:
		return fmt.Errorf("finalizing %s: staged is %s", digest, s.Digest())
	case !s.DownloadOnly:
		return fmt.Errorf("finalizing %s: the staged deployment is not download-only (already unlocked)", digest)
	}
	wait := o.ApplyWait
	if wait <= 0 {
		wait = DefaultApplyWait
	}
	err = o.Client.Apply(ctx, wait)
	switch {
	case errors.Is(err, bootc.ErrApplyRunning):
		return o.rebooting(ctx, digest, err)
	case errors.Is(err, bootc.ErrNoStagedDeployment):
		return rpmostree.Marked(engine.ErrNoStagedDeployment, err)
	}
	return err
}

// rebooting tells a reboot under way (the staged deployment unlocked:
// bootc waits for the shutdown it started) from a stuck --apply.
func (o BootcOS) rebooting(ctx context.Context, digest string, applyErr error) error {
	h, err := o.host(ctx)
	if err != nil {
		return fmt.Errorf("%w; then: %w", applyErr, err)
	}
	if s := h.Status.Staged; s != nil && s.Digest() == digest && !s.DownloadOnly {
		return nil
	}
	return fmt.Errorf("finalizing %s: %w, and the staged deployment is still download-only", digest, applyErr)
}

// Cleanup discards the staged deployment (rpm-ostree cleanup -p).
func (o BootcOS) Cleanup(ctx context.Context) error {
	if o.RpmOstree == nil {
		return errors.New("discarding the staged deployment: bootc has no command for it and no rpm-ostree is configured (agent.rpm_ostree)")
	}
	return o.RpmOstree.Cleanup(ctx)
}

// Package adapters connects the engine's ports to the real packages:
// rpm-ostree (agent/rpmostree), gentle staging (agent/stage), the reboot
// lock (agent/lock) and the etcd member checks (agent/etcdmember).
package adapters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// OS is engine.OS over the rpm-ostree CLI. Deployments are identified by
// rpmostree.Deployment.Target (the image digest for container origins, the
// base commit otherwise), which is also what `upgrade --check` reports.
type OS struct {
	Client *rpmostree.Client
	// Image, when set (updates.source = "image"), is what the host must
	// follow; `upgrade --check` only knows the booted origin.
	Image string
	// Graph, when set (updates.source = "graph"), chooses the target from
	// the update graph instead of `upgrade --check`.
	Graph GraphSource
	// Lock, when set, reads the staged deployment's finalization lock
	// (rpmostree.FinalizationLock); rpm-ostree's status cannot tell.
	Lock FinalizationLock
	// Log receives what Lock could not tell, once per distinct error
	// (LockErr remembers the last one; nil: every time).
	Log     *slog.Logger
	LockErr *LastError
}

// LastError remembers the last error reported, so that a poll repeating the
// same failure says it once.
type LastError struct {
	mu   sync.Mutex
	last string
}

// Changed records err and says whether it differs from the last one.
func (l *LastError) Changed(err error) bool {
	if l == nil {
		return true
	}
	s := ""
	if err != nil {
		s = err.Error()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := s != l.last
	l.last = s
	return changed
}

// FinalizationLock says whether the staged deployment with this commit
// checksum is still locked for finalization.
type FinalizationLock interface {
	Locked(ctx context.Context, checksum string) (bool, error)
}

// GraphSource chooses the update for the host st describes (graph.Source).
type GraphSource interface {
	Check(ctx context.Context, st *rpmostree.Status) (*state.Target, error)
}

func deployment(d rpmostree.Deployment) engine.Deployment {
	return engine.Deployment{Checksum: d.Target(), Version: d.Version}
}

// Status reads the booted and staged deployments.
func (o OS) Status(ctx context.Context) (engine.OSStatus, error) {
	st, err := o.Client.Status(ctx)
	if err != nil {
		return engine.OSStatus{}, err
	}
	b, ok := st.Booted()
	if !ok {
		return engine.OSStatus{}, errors.New("rpm-ostree status shows no booted deployment (not an ostree-booted host?)")
	}
	s := engine.OSStatus{Booted: deployment(b)}
	if d, ok := st.Staged(); ok {
		sd := deployment(d)
		sd.Unlocked = o.unlocked(ctx, d)
		s.Staged = &sd
	}
	return s, nil
}

// unlocked: only what the host shows counts; a lock that cannot be read
// is logged and taken as held (finalize-deployment still refuses an
// unlocked one, and an error here would stop every step).
func (o OS) unlocked(ctx context.Context, d rpmostree.Deployment) bool {
	if o.Lock == nil {
		return false
	}
	locked, err := o.Lock.Locked(ctx, d.Checksum)
	if changed := o.LockErr.Changed(err); err != nil {
		if o.Log != nil && ctx.Err() == nil && changed {
			o.Log.Warn("cannot tell whether the staged deployment is still locked for finalization", "checksum", d.Checksum, "err", err)
		}
		return false
	}
	return !locked
}

// Check asks rpm-ostree for an update.
func (o OS) Check(ctx context.Context) (*state.Target, error) {
	st, err := o.Client.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("checking for OS updates: %w", mapBusy(err))
	}
	if o.Graph != nil {
		return o.Graph.Check(ctx, st)
	}
	if o.Image != "" {
		if t, ok := rebaseTarget(st, o.Image); ok {
			return t, nil
		}
	}
	b, _ := st.Booted()
	if t, ok := stagedImage(st, b); ok {
		return t, nil
	}
	r, err := o.Client.Check(ctx)
	if err != nil {
		return nil, mapBusy(err)
	}
	if b.IsContainer() && r.Available {
		// The check names neither the new image's digest nor its version;
		// status's cached-update has the version (not the digest).
		if st, err = o.Client.Status(ctx); err != nil {
			return nil, fmt.Errorf("checking for OS updates: reading the cached update: %w", mapBusy(err))
		}
	}
	t, err := checkTarget(st, r)
	if err == nil && t == nil && r.PackagesOnly() && o.Log != nil {
		o.Log.Info("only layered packages have updates: not an OS update; they come with the next base update", "diff", r.Diff)
	}
	return t, err
}

// checkTarget is the update `upgrade --check` found (r) for the host st
// describes, nil for none.
//   - A container origin: the check shows a layer diff, never the new
//     image's digest (rpm-ostree learns it only by pulling), so the target
//     is named by the image until staged; staging upgrades the origin and
//     the engine then adopts the staged digest.
//   - A layered host whose base did not move (a Diff line, no Commit) has
//     no update for the agent: its targets are base commits, and a
//     package-only upgrade stages the booted base again, which the engine
//     cannot tell from the booted deployment nor needs to reboot the
//     cluster for; rpm-ostree re-resolves layered packages at every
//     upgrade, so they come with the next base update.
//   - Otherwise the Commit is the new base commit.
func checkTarget(st *rpmostree.Status, r rpmostree.CheckResult) (*state.Target, error) {
	if !r.Available || r.PackagesOnly() {
		return nil, nil
	}
	if b, _ := st.Booted(); b.IsContainer() {
		t := &state.Target{Checksum: b.ContainerImageReference}
		if c := st.CachedUpdate; c != nil && c.Origin == b.ContainerImageReference {
			t.Version = c.Version
		}
		return t, nil
	}
	if r.Commit != "" {
		return &state.Target{Checksum: r.Commit, Version: r.Version}, nil
	}
	return nil, errors.New("checking for OS updates: rpm-ostree reported an update without a commit, a layer diff or a package diff")
}

// stagedImage: on a container origin, a staged deployment of the booted
// image with another digest is the update (ok false otherwise). The check
// would describe it by its ostree commit, which is not how the agent names
// an image's deployment (its digest). So an image published after staging
// is found only after the reboot: unlike an ostree ref's, it does not
// replace the staged one.
func stagedImage(st *rpmostree.Status, b rpmostree.Deployment) (*state.Target, bool) {
	s, ok := st.Staged()
	if !ok || !b.IsContainer() || s.ContainerImageReference != b.ContainerImageReference || s.Target() == "" || s.Target() == b.Target() {
		return nil, false
	}
	return &state.Target{Checksum: s.Target(), Version: s.Version}, true
}

// rebaseTarget answers the check for the image source while the booted
// deployment does not follow image (ok false once it does: then `upgrade
// --check` knows). The update is the rebase to image; its digest is only
// known once staged, so until then the target is named by the image, and
// once a deployment of image is staged, it is the target: a check following
// the old origin would otherwise offer something else and replace it.
func rebaseTarget(st *rpmostree.Status, image string) (*state.Target, bool) {
	b, ok := st.Booted()
	if !ok || b.ContainerImageReference == image {
		return nil, false
	}
	if s, ok := st.Staged(); ok && s.ContainerImageReference == image && s.Target() != "" {
		return &state.Target{Checksum: s.Target(), Version: s.Version}, true
	}
	return &state.Target{Checksum: image, Version: "rebase"}, true
}

// Finalize finalizes the staged deployment if it is checksum.
func (o OS) Finalize(ctx context.Context, checksum string) error {
	st, err := o.Client.Status(ctx)
	if err != nil {
		return fmt.Errorf("finalizing %s: %w", checksum, err)
	}
	d, ok := st.Staged()
	if !ok {
		return fmt.Errorf("finalizing %s: %w", checksum, engine.ErrNoStagedDeployment)
	}
	if d.Target() != checksum {
		return fmt.Errorf("finalizing %s: staged is %s", checksum, d.Target())
	}
	err = o.Client.Finalize(ctx, d)
	if errors.Is(err, rpmostree.ErrRebooting) {
		// An earlier finalize (from a process that died before recording
		// its result) already unlocked it and started the reboot.
		return nil
	}
	return mapBusy(mapFinalize(err))
}

// mapFinalize gives rpm-ostree's refusals the engine's meaning, keeping the
// original error (argv, exit code, stderr: which says the refusal in
// rpm-ostree's words) as the message.
func mapFinalize(err error) error {
	for _, m := range []struct{ from, to error }{
		{rpmostree.ErrNoStagedDeployment, engine.ErrNoStagedDeployment},
		{rpmostree.ErrInhibited, engine.ErrInhibited},
	} {
		if errors.Is(err, m.from) {
			return rpmostree.Marked(m.to, err)
		}
	}
	return err
}

// mapBusy gives rpm-ostree's "Transaction in progress" the engine's meaning
// (wait, not a failure), keeping the original error as the message.
func mapBusy(err error) error {
	if errors.Is(err, rpmostree.ErrBusy) {
		return rpmostree.Marked(engine.ErrBusy, err)
	}
	return err
}

// Cleanup discards the staged deployment.
func (o OS) Cleanup(ctx context.Context) error { return o.Client.Cleanup(ctx) }

// RegisterDriver makes rpm-ostree refuse manual upgrades with a pointer to
// the agent (the registration lives in /run: every start redoes it). A host
// whose updates another driver (zincati) owns is refused: two drivers
// would fight over the staged deployment. A failed registration is only
// logged: the agent works without it.
func (o OS) RegisterDriver(ctx context.Context, name string, log *slog.Logger) error {
	st, err := o.Client.Status(ctx)
	if err != nil {
		return err
	}
	if d := st.UpdateDriver; d != nil && d.Name != name {
		return &ForeignDriverError{Name: d.Name, Unit: d.Unit}
	}
	if err := o.Client.RegisterDriver(ctx, name); err != nil {
		log.Warn("not registered as rpm-ostree's update driver: manual upgrades are not refused", "err", err)
	}
	return nil
}

// ErrForeignDriver: another update driver (zincati) owns updates on this
// host. Restarting does not change that: the daemon exits for good.
var ErrForeignDriver = errors.New("another update driver owns this host")

// ForeignDriverError names the registered driver and what to do about it.
type ForeignDriverError struct{ Name, Unit string }

func (e *ForeignDriverError) Error() string {
	return fmt.Sprintf("updates on this host are driven by %s (%s): two drivers would fight over the staged deployment; "+
		"on an update-agent host run `systemctl mask --now %s`, then `systemctl restart update-agent`", e.Name, e.Unit, e.Unit)
}

func (e *ForeignDriverError) Is(target error) bool { return target == ErrForeignDriver }

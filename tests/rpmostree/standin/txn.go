package standin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// target is what a staging transaction resolved: where from and which commit.
type target struct {
	refspec string
	remote  string
	ref     string
	src     string // local path of the file:// remote
	csum    string
}

// resolve finds the commit refspec (or revision) designates in its remote.
func (d *Daemon) resolve(ctx context.Context, refspec, revision string) (target, error) {
	remote, ref, err := splitRefspec(refspec)
	if err != nil {
		return target{}, err
	}
	src, err := d.ostree.remotePath(ctx, d.store.repo(), remote)
	if err != nil {
		return target{}, err
	}
	t := target{refspec: refspec, remote: remote, ref: ref, src: src}
	rev := ref
	if revision != "" {
		rev = revision
	}
	t.csum, err = d.ostree.revParse(ctx, src, rev)
	if err != nil {
		return target{}, fmt.Errorf("Fetching checksum %s: %w", rev, err)
	}
	return t, nil
}

// current returns the deployment new ones are based on (rpm-ostree's merge
// deployment: the staged one if any, else the booted one).
func (d *Daemon) current(ctx context.Context) (Deployments, *Staged, Dep, error) {
	deps, staged, err := d.store.load(ctx)
	if err != nil {
		return deps, nil, Dep{}, err
	}
	cur := deps.Booted
	if staged != nil {
		cur = staged.Deployment
	}
	return deps, staged, cur, nil
}

// check is `upgrade --check`: is the origin's tip a different commit than
// the booted one? It reads the remote and records what it found as the
// cached update, as rpm-ostreed does.
func (d *Daemon) check(ctx context.Context, _ Request, _ func(string, ...any)) (Event, error) {
	deps, _, err := d.store.load(ctx)
	if err != nil {
		return Event{}, err
	}
	t, err := d.resolve(ctx, deps.Booted.Origin, "")
	if err != nil {
		return Event{}, err
	}
	var rpmmd map[string]string
	if _, err := readJSON(rpmmdFile(t.src), &rpmmd); err != nil {
		return Event{}, err
	}
	upgraded, _ := newerPackages(deps.Booted.Layered, rpmmd)
	if t.csum == deps.Booted.Checksum && upgraded == 0 {
		return Event{}, d.cfg.saveCachedCheck(nil)
	}
	v, ts, err := d.ostree.commitInfo(ctx, t.src, t.csum)
	if err != nil {
		return Event{}, err
	}
	u := UpdateInfo{Checksum: t.csum, Version: v, Timestamp: ts, SameBase: t.csum == deps.Booted.Checksum, Diff: diffSummary(upgraded)}
	if deps.Booted.Image != "" {
		// One layer per image, its size unknown to the stand-in.
		u.Layers = &ManifestDiff{Total: 1, NRemoved: 1, NAdded: 1}
	}
	return Event{Update: &u}, d.cfg.saveCachedCheck(newCachedCheck(deps.Booted, u))
}

// deploy is `deploy REVISION`, possibly registering the update driver.
func (d *Daemon) deploy(ctx context.Context, req Request, emit func(string, ...any)) (Event, error) {
	if req.RegisterDriver != "" {
		if req.CallerUnit == "" {
			return Event{}, errors.New("could not find caller systemd unit")
		}
		if err := writeJSON(d.cfg.driverFile(), Driver{Name: req.RegisterDriver, Unit: req.CallerUnit}); err != nil {
			return Event{}, err
		}
		d.log.Info("registered update driver", "driver", req.RegisterDriver, "systemd_unit", req.CallerUnit)
		if !req.HasRevision || req.Revision == "" {
			emit("Empty string revision found; registering update driver only")
			return Event{}, nil
		}
	}
	return d.stage(ctx, req, emit)
}

// stage is upgrade, deploy and rebase: pull the target into the host repo,
// check it out as a new deployment, record it as staged in the run dir.
func (d *Daemon) stage(ctx context.Context, req Request, emit func(string, ...any)) (Event, error) {
	deps, old, cur, err := d.current(ctx)
	if err != nil {
		return Event{}, err
	}
	refspec, image := cur.Origin, cur.Image
	if req.Verb == "rebase" {
		refspec, image = req.Refspec, ""
		backing, isImage, err := imageBacking(refspec)
		switch {
		case err != nil:
			return Event{}, err
		case isImage:
			refspec, image = backing, req.Refspec
		case !strings.Contains(refspec, ":"):
			remote, _, _ := strings.Cut(cur.Origin, ":")
			refspec = remote + ":" + refspec
		}
		emit("Updating from: %s", req.Refspec)
	}
	rev := req.Revision
	switch {
	case isDigest(rev) && image == "":
		return Event{}, fmt.Errorf("Invalid checksum: %s", rev)
	case isDigest(rev):
		rev = ""
	}
	t, err := d.resolve(ctx, refspec, rev)
	if err == nil && rev != req.Revision {
		t, err = d.resolveDigest(ctx, t, req.Revision)
	}
	if err != nil {
		return Event{}, err
	}
	var rpmmd map[string]string
	if _, err := readJSON(rpmmdFile(t.src), &rpmmd); err != nil {
		return Event{}, err
	}
	upgraded, layered := newerPackages(cur.Layered, rpmmd)
	if t.csum == cur.Checksum && refspec == cur.Origin && image == cur.Image && upgraded == 0 {
		// The trap this stand-in must keep: nothing changes, so a staged
		// deployment keeps whatever lock state it had.
		if req.Verb == "upgrade" {
			emit("No upgrade available.")
		} else {
			emit("No change.")
		}
		return Event{}, nil
	}
	version, ts, err := d.ostree.commitInfo(ctx, t.src, t.csum)
	if err != nil {
		return Event{}, err
	}
	refuseOlder := (req.Verb == "upgrade" && !req.AllowDowngrade) || req.DisallowDowngrade
	if refuseOlder && ts < cur.Timestamp {
		return Event{}, fmt.Errorf("Upgrade target revision '%s' with timestamp '%s' is chronologically older than current revision '%s' with timestamp '%s'; use --allow-downgrade to permit",
			t.csum, fmtTS(ts), cur.Checksum, fmtTS(cur.Timestamp))
	}
	if err := sleepCtx(ctx, d.cfg.PullDelay); err != nil {
		return Event{}, err
	}
	emit("Receiving objects for %s", t.csum)
	if req.Revision != "" {
		err = d.ostree.pullCommit(ctx, d.store.repo(), t.src, t.csum)
	} else {
		var got string
		got, err = d.ostree.pullRef(ctx, d.store.repo(), t.src, t.remote, t.ref)
		t.csum = got
	}
	if err != nil {
		return Event{}, err
	}
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	nd := Dep{OSName: cur.OSName, Checksum: t.csum, Origin: refspec, Image: image, Version: version, Timestamp: ts}
	if len(layered) > 0 {
		nd.Layered = layered
	}
	if nd, err = d.store.stage(ctx, nd, deps, old, req.LockFinalization); err != nil {
		return Event{}, err
	}
	emit("Staging deployment...done")
	if req.LockFinalization {
		emit("Deployment is locked for finalization")
	}
	d.log.Info("staged deployment", "id", nd.ID(), "locked", req.LockFinalization)
	return Event{Changed: true}, nil
}

// finalize is `finalize-deployment`, with upstream's checks in upstream's
// order: staged?, checksum, inhibitors, lock.
func (d *Daemon) finalize(ctx context.Context, req Request, _ func(string, ...any)) (Event, error) {
	_, staged, err := d.store.load(ctx)
	if err != nil {
		return Event{}, err
	}
	if staged == nil {
		return Event{}, errors.New("No pending staged deployment found")
	}
	sum := staged.Deployment.Checksum
	if staged.Deployment.Image != "" {
		// A container deployment is named by its image digest
		// (coreos/rpm-ostree src/daemon/rpmostreed-transaction-types.cxx,
		// finalize_deployment_transaction_execute).
		sum = imageDigest(sum)
	}
	if !req.AllowMissing && req.Checksum == "" {
		return Event{}, errors.New("Missing expected checksum")
	}
	if req.Checksum != "" && req.Checksum != sum {
		return Event{}, fmt.Errorf("Expected staged base checksum %s, but found %s", req.Checksum, sum)
	}
	if err := d.checkInhibitors(ctx); err != nil {
		return Event{}, err
	}
	if !staged.Locked {
		if !req.AllowUnlocked {
			return Event{}, errors.New("Staged deployment already unlocked")
		}
	} else {
		if err := d.store.unlock(ctx, *staged); err != nil {
			return Event{}, fmt.Errorf("Failed to unlock finalization of staged deployment: %w", err)
		}
	}
	d.log.Info(fmt.Sprintf("Finalized deployment; rebooting into %s", sum))
	d.mu.Lock()
	d.rebooting = true
	d.mu.Unlock()
	return Event{}, nil
}

// cleanup is `cleanup -p/-r`: drop the staged and/or rollback deployment.
func (d *Daemon) cleanup(ctx context.Context, req Request, emit func(string, ...any)) (Event, error) {
	deps, staged, err := d.store.load(ctx)
	if err != nil {
		return Event{}, err
	}
	changed := false
	if req.CleanupPending && staged != nil {
		if err := d.store.dropStaged(ctx, *staged); err != nil {
			return Event{}, err
		}
		d.log.Info("removed staged deployment", "id", staged.Deployment.ID())
		changed = true
	}
	if req.CleanupRollback && deps.Rollback != nil {
		if err := d.store.dropRollback(ctx, deps); err != nil {
			return Event{}, err
		}
		changed = true
	}
	if !changed {
		emit("Deployments unchanged.")
	}
	return Event{Changed: changed}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func fmtTS(ts uint64) string {
	return time.Unix(int64(ts), 0).UTC().Format("2006-01-02T15:04:05Z")
}

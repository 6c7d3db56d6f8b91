package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/update-agent/update-agent/agent/systemd"
)

// undo reverts what j records, newest first. Every step tolerates a change
// that was recorded but never made. The journal goes only when all
// succeeded; otherwise it stays for Recover on the next start.
func (s *Stager) undo(ctx context.Context, j *journal) error {
	// First: a unit the guard failed to thaw on its way out would hold the
	// update (and every later rpm-ostree call) forever.
	errs := s.thawNamed(ctx, j.StagingUnit, j.DaemonUnit)
	if j.Fsync != nil {
		args := []string{"unset", fsyncKey}
		if j.Fsync.WasSet {
			args = []string{"set", fsyncKey, j.Fsync.Old}
		}
		if _, err := s.ostree(ctx, "restoring the repo's per-object fsync setting", args...); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s of %s: %w", fsyncKey, j.Fsync.Repo, err))
		}
	}
	reload := j.DropIn != ""
	for i := len(j.Runtime) - 1; i >= 0; i-- {
		rc := j.Runtime[i]
		props := make([]sd.Property, len(rc.Old))
		for k, p := range rc.Old {
			props[k] = p.Property()
		}
		// Set the old values live first: removing systemd's control files
		// alone would leave the running cgroup as it is.
		if err := s.d.Systemd.SetRuntime(ctx, rc.Unit, props...); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range rc.Remove {
			if _, err := systemd.RemoveDropIn(f); err != nil {
				errs = append(errs, err)
			}
		}
		reload = reload || len(rc.Remove) > 0
	}
	if j.DropIn != "" {
		if removed, err := systemd.RemoveDropIn(j.DropIn); err != nil {
			errs = append(errs, err)
		} else if removed {
			s.log.Info("staging drop-in removed", "path", j.DropIn, "systemd_unit", j.DaemonUnit)
		}
	}
	if reload {
		if err := s.d.Systemd.Reload(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if j.DaemonRestarted && len(errs) == 0 {
		// It was restarted to take the policy; restart it again (when idle)
		// so it does not keep the idle I/O class until it exits on its own.
		idle := false
		if s.d.Daemon != nil {
			idle, _ = s.d.Daemon.Idle(ctx)
		}
		if idle {
			if err := s.d.Systemd.Restart(ctx, j.DaemonUnit); err != nil {
				s.log.Warn("restarting the daemon without the staging policy", "systemd_unit", j.DaemonUnit, "err", err)
			}
		}
	}
	if j.Scheduler {
		if err := s.sched.Restore(); err != nil {
			errs = append(errs, err)
		}
	}
	if j.IOCost {
		if err := s.iocost.Restore(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if serr := s.saveJournal(j); serr != nil {
			err = errors.Join(err, serr)
		}
		return fmt.Errorf("undoing the staging window: %w", err)
	}
	*j = journal{}
	return s.removeJournal()
}

// Recover undoes what an earlier process left behind when it died during a
// staging: a frozen or still running staging unit, a frozen daemon, the
// drop-in, runtime properties, the fsync setting and the scheduler.
// Idempotent; nothing to do is not an error. It fails with ErrBusy while
// another process stages on this host.
func (s *Stager) Recover(ctx context.Context) error {
	unlock, err := s.lock()
	if err != nil {
		return fmt.Errorf("recovering: %w", err)
	}
	defer unlock()
	return s.recover(ctx)
}

func (s *Stager) recover(ctx context.Context) error {
	j, err := s.loadJournal()
	if err != nil {
		// Unreadable (an I/O error; one that does not parse is set aside
		// by loadJournal): what it names is unknown, but the units this
		// stager would have frozen are known; a frozen rpm-ostreed never
		// answers.
		s.thawNamed(ctx, s.o.StagingUnit, s.o.DaemonUnit)
		return err
	}
	if j == nil {
		// The scheduler and iocost keep their own records: a crash right
		// after one changed a disk leaves no journal only if the journal
		// write failed.
		return errors.Join(wrap("recovering", s.sched.Restore()), wrap("recovering", s.iocost.Restore()))
	}
	s.dropEarlierBoot(j)
	if f := j.Foreign; f != nil {
		// Its transaction is somebody else's: only the policy goes.
		s.log.Warn("undoing the staging window an interrupted process kept around a foreign transaction",
			"method", f.Method, "sender", f.Sender, "found", f.Found)
	}
	s.log.Warn("undoing what an interrupted staging left behind", "staging_unit", j.StagingUnit,
		"daemon_unit", j.DaemonUnit, "drop_in", j.DropIn, "scheduler", j.Scheduler, "iocost", j.IOCost)
	// Before anything else: a unit left frozen would hold the update forever.
	if errs := s.thawNamed(ctx, j.StagingUnit, j.DaemonUnit); len(errs) > 0 {
		return fmt.Errorf("recovering: %w", errors.Join(errs...))
	}
	if j.StagingUnit != "" {
		st, err := s.d.Systemd.Status(ctx, j.StagingUnit)
		if err == nil && st.LoadState == "loaded" {
			if st.ActiveState == "failed" {
				_ = s.d.Systemd.ResetFailed(ctx, j.StagingUnit)
			} else if st.ActiveState != "inactive" {
				// Unguarded, it would write at full speed: stop it (the
				// engine stages again) before removing its policy.
				s.log.Warn("stopping a staging unit left running", "staging_unit", j.StagingUnit, "state", st.ActiveState+"/"+st.SubState)
				if err := s.d.Systemd.Stop(ctx, j.StagingUnit); err != nil {
					return fmt.Errorf("recovering: %w", err)
				}
			}
		}
	}
	if err := s.undo(ctx, j); err != nil {
		return fmt.Errorf("recovering: %w", err)
	}
	return nil
}

// thawNamed thaws those of units that systemd reports frozen (or freezing);
// a unit that is gone, or not frozen, needs nothing. It returns what failed.
func (s *Stager) thawNamed(ctx context.Context, units ...string) []error {
	var errs []error
	for _, u := range units {
		if u == "" {
			continue
		}
		st, err := s.d.Systemd.Status(ctx, u)
		if err != nil {
			// Unknown state: thaw anyway (harmless when not frozen).
			if terr := s.d.Systemd.Thaw(ctx, u); terr != nil {
				errs = append(errs, errors.Join(err, terr))
			}
			continue
		}
		if st.LoadState != "loaded" || st.FreezerState == "" || st.FreezerState == "running" {
			continue
		}
		s.log.Warn("thawing a unit left frozen", "systemd_unit", u, "freezer_state", st.FreezerState)
		if err := s.d.Systemd.Thaw(ctx, u); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// RecoverTimeout bounds RecoverAtStart: systemd's start timeout must leave
// room for the first rpm-ostree status after it.
const RecoverTimeout = 30 * time.Second

// RecoverAtStart is the first thing the daemon and stage-once do, before
// they talk to rpm-ostree: a process killed while the guard had rpm-ostreed
// frozen (SIGKILL, OOM, a panic, the watchdog) leaves it frozen, and a
// frozen rpm-ostreed never answers. recover is Stager.Recover (or the
// daemon's adapter of it). A failure is logged, not fatal: the engine
// retries its recover step, and the next start this one.
func RecoverAtStart(ctx context.Context, log *slog.Logger, recover func(context.Context) error) {
	ctx, cancel := context.WithTimeout(ctx, RecoverTimeout)
	defer cancel()
	switch err := recover(ctx); {
	case err == nil:
	case errors.Is(err, ErrBusy):
		// The other process (stage-once, or the daemon) owns the window.
		log.Info("not undoing a staging at start: another process stages", "err", err)
	default:
		log.Warn("undoing an interrupted staging at start failed; retried later", "err", err)
	}
}

// wrap is fmt.Errorf("what: %w") that keeps nil nil.
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

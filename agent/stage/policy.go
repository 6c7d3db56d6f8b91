package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/systemd"
)

// applyDaemonPolicy puts the policy on the daemon that does the writing.
// A running daemon gets the cgroup half live; a drop-in would reach only
// its next start, after the window, and its daemon-reload cost 4-9 s of
// PID 1 in the test guest, with etcd's p99 8.6x alone while it ran. A
// daemon that is not running (rpm-ostreed exits when idle) or is restarted
// for the window gets the drop-in, which its start reads.
func (s *Stager) applyDaemonPolicy(ctx context.Context, j *journal, p systemd.Policy) error {
	unit := s.o.DaemonUnit
	j.DaemonUnit = unit // the guard may freeze it: undo thaws it
	st, err := s.d.Systemd.Status(ctx, unit)
	if err != nil {
		return err
	}
	restart := false
	// Never for a foreign window: the daemon runs somebody's transaction.
	if st.ActiveState == "active" && s.o.RestartIdleDaemon && s.d.Daemon != nil && j.Foreign == nil {
		idle, err := s.d.Daemon.Idle(ctx)
		if err != nil {
			s.log.Warn("cannot tell whether the daemon is idle; not restarting it", "systemd_unit", unit, "err", err)
		}
		// A fresh process gets the whole policy, I/O class and nice too.
		restart = err == nil && idle
	}
	if st.ActiveState != "active" || restart {
		if err := s.writeDaemonDropIn(ctx, j, unit, p); err != nil {
			return err
		}
		if !restart {
			return nil // its next start reads the drop-in
		}
		j.DaemonRestarted = true
		if err := s.saveJournal(j); err != nil {
			return err
		}
		return s.d.Systemd.Restart(ctx, unit)
	}
	// Running and not restarted (the default: measured, the restart
	// stalled etcd's puts 300-700 ms while the window opened): the cgroup
	// half applies live; the process half (I/O class, nice) would need a
	// new process.
	if props := p.CgroupProperties(); len(props) > 0 {
		if err := s.setRuntime(ctx, j, unit, props...); err != nil {
			s.log.Warn("could not set the policy on the running daemon", "systemd_unit", unit, "err", err)
		}
	}
	return nil
}

// writeDaemonDropIn writes the policy as a runtime drop-in for the
// daemon's next start and reloads systemd, journaled first.
func (s *Stager) writeDaemonDropIn(ctx context.Context, j *journal, unit string, p systemd.Policy) error {
	text, err := p.DropIn("Written by update-agent for one staging window and removed after it.")
	if err != nil {
		return err
	}
	j.DropIn = systemd.DropInPath(s.o.RuntimeUnitDir, unit, DropInName)
	if err := s.saveJournal(j); err != nil {
		return err
	}
	if _, err := systemd.WriteDropIn(s.o.RuntimeUnitDir, unit, DropInName, text); err != nil {
		return err
	}
	t := time.Now()
	if err := s.d.Systemd.Reload(ctx); err != nil {
		return err
	}
	s.log.Info("staging setup step", "step", "systemd daemon-reload (for the drop-in)", "seconds", round3(time.Since(t).Seconds()), "ok", true)
	return nil
}

// setRuntime sets runtime properties, recording first how to set them back.
func (s *Stager) setRuntime(ctx context.Context, j *journal, unit string, props ...sd.Property) error {
	names := make([]string, len(props))
	for i, p := range props {
		names[i] = p.Name
	}
	old, err := s.d.Systemd.Save(ctx, unit, names...)
	if err != nil {
		return err
	}
	rc := runtimeChange{Unit: unit, Old: old}
	for _, n := range names {
		f := systemd.ControlFile(s.o.RuntimeControlDir, unit, n)
		if _, err := os.Stat(f); errors.Is(err, os.ErrNotExist) {
			rc.Remove = append(rc.Remove, f)
		}
	}
	j.Runtime = append(j.Runtime, rc)
	if err := s.saveJournal(j); err != nil {
		return err
	}
	return s.d.Systemd.SetRuntime(ctx, unit, props...)
}

const fsyncKey = "core.per-object-fsync"

func (s *Stager) ostree(ctx context.Context, desc string, args ...string) (oplog.Result, error) {
	argv := append(append([]string(nil), s.o.OstreeArgv...), "config", "--repo="+s.o.Repo)
	return s.d.Runner.Run(ctx, desc, append(argv, args...)...)
}

func (s *Stager) setFsync(ctx context.Context, j *journal) error {
	fc := &fsyncChange{Repo: s.o.Repo}
	res, err := s.ostree(ctx, "reading the repo's per-object fsync setting", "get", fsyncKey)
	switch {
	case err == nil:
		fc.Old, fc.WasSet = strings.TrimSpace(string(res.Stdout)), true
	case strings.Contains(string(res.Stderr), "does not have key"):
	default:
		return fmt.Errorf("reading %s of %s: %w", fsyncKey, s.o.Repo, err)
	}
	j.Fsync = fc
	if err := s.saveJournal(j); err != nil {
		return err
	}
	if _, err := s.ostree(ctx, "enabling per-object fsync for staging", "set", fsyncKey, "true"); err != nil {
		return fmt.Errorf("setting %s of %s: %w", fsyncKey, s.o.Repo, err)
	}
	return nil
}

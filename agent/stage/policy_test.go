package stage

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/update-agent/update-agent/agent/systemd"
)

// rpm-ostreed exits when idle: a daemon that is not running gets the whole
// policy as a drop-in, which its start (by the staging command) reads.
func TestRunStoppedDaemonGetsTheDropIn(t *testing.T) {
	e := newEnv(t)
	e.sys.unit(daemonUnit).active, e.sys.unit(daemonUnit).sub = "inactive", "dead"
	s := e.stager(t, fakeDaemon{idle: true})
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		e.assertDropIn(t)
		if n := e.sys.called("Reload"); n != 1 {
			t.Errorf("%d daemon-reloads while staging, want 1 (for the drop-in)", n)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	if _, err := s.Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	if n := e.sys.called("Restart"); n != 0 {
		t.Errorf("a stopped daemon restarted %d times", n)
	}
	if n := e.sys.called("Reload"); n != 2 {
		t.Errorf("%d daemon-reloads, want 2 (drop-in written, drop-in removed)", n)
	}
	e.assertUndone(t)
}

// A running daemon: no drop-in and no daemon-reload while the window
// opens (the drop-in would reach only its next start). Closing it reloads
// once, so that systemd forgets the runtime control files it wrote.
func TestRunRunningDaemonNoReloadToOpen(t *testing.T) {
	e := newEnv(t)
	s := e.stager(t, fakeDaemon{idle: false})
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		if n := e.sys.called("Reload"); n != 0 {
			t.Errorf("%d daemon-reloads opening the window, want none", n)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	if _, err := s.Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	if n := e.sys.called("Reload"); n != 1 {
		t.Errorf("%d daemon-reloads in all, want 1 (closing)", n)
	}
	if _, err := os.Stat(e.dropIn()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("drop-in: %v", err)
	}
	e.assertUndone(t)
}

package stage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/systemd"
)

func TestRunSuccessBusyDaemon(t *testing.T) {
	e := newEnv(t)
	s := e.stager(t, fakeDaemon{idle: false})
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		e.assertApplied(t, false)
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unit.Result != "success" || strings.Join(rep.Disks, ",") != "vdb" {
		t.Errorf("report %+v", rep)
	}
	if e.sys.called("Restart") != 0 {
		t.Error("restarted a busy daemon")
	}
	e.assertUndone(t)
}

func TestRunIdleDaemonIsNotRestartedByDefault(t *testing.T) {
	e := newEnv(t)
	s := e.stager(t, fakeDaemon{idle: true})
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		e.assertApplied(t, false)
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	if _, err := s.Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	if n := e.sys.called("Restart"); n != 0 {
		t.Errorf("daemon restarted %d times, want none: the cgroup policy is set live", n)
	}
	e.assertUndone(t)
}

func TestRunSuccessIdleDaemonIsRestarted(t *testing.T) {
	e := newEnv(t)
	e.opts.RestartIdleDaemon = true
	s := e.stager(t, fakeDaemon{idle: true})
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		e.assertApplied(t, true)
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	if _, err := s.Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	// Once to take the policy, once to drop it.
	if n := e.sys.called("Restart " + daemonUnit); n != 2 {
		t.Errorf("daemon restarted %d times, want 2", n)
	}
	// The restart brings the policy; only MemoryHigh, which follows the
	// daemon's own memory, is set live (and set back).
	if n, m := e.sys.called("SetRuntime "+daemonUnit), e.sys.called("SetRuntime "+daemonUnit+" MemoryHigh"); n != m {
		t.Errorf("%d runtime property calls on a daemon that was restarted with the drop-in, %d of them MemoryHigh alone", n, m)
	}
	e.assertUndone(t)
}

func TestRunKeepsPreexistingSettings(t *testing.T) {
	e := newEnv(t)
	e.ostree.conf[fsyncKey] = "false"
	// An operator's own runtime setting on etcd: kept, not removed.
	own := systemd.ControlFile(e.controlDir, etcdUnit, "IODeviceLatencyTargetUSec")
	os.MkdirAll(filepath.Dir(own), 0o755)
	os.WriteFile(own, []byte("[Service]\nIODeviceLatencyTargetSec=/dev/vdb 50ms\n"), 0o644)
	e.sys.units[etcdUnit].props["IODeviceLatencyTargetUSec"] = systemd.SavedProp{Name: "IODeviceLatencyTargetUSec", IsDevices: true,
		Devices: []systemd.DeviceValue{{Path: "/dev/vdb", Value: 50000}}}
	s := e.stager(t, nil)
	if _, err := s.Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	if e.ostree.conf[fsyncKey] != "false" {
		t.Errorf("fsync setting %q, want the original false", e.ostree.conf[fsyncKey])
	}
	if _, err := os.Stat(own); err != nil {
		t.Errorf("operator's control file removed: %v", err)
	}
	if lt := e.sys.units[etcdUnit].props["IODeviceLatencyTargetUSec"]; len(lt.Devices) != 1 || lt.Devices[0].Value != 50000 {
		t.Errorf("etcd latency target %+v, want the original 50ms", lt)
	}
}

func TestRunFailureUndoes(t *testing.T) {
	e := newEnv(t)
	s := e.stager(t, nil)
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		return systemd.UnitStatus{ActiveState: "failed", SubState: "failed", Result: "exit-code", ExecMainCode: 1, ExecMainStatus: 1}, nil
	}
	_, err := s.Run(context.Background(), argv)
	if err == nil || !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), "journalctl -u "+stagingUnit) {
		t.Errorf("err %v", err)
	}
	if e.sys.called("ResetFailed "+stagingUnit) == 0 {
		t.Error("failed unit not reset")
	}
	e.assertUndone(t)
}

func TestRunOKExitStatus(t *testing.T) {
	e := newEnv(t)
	e.opts.OKExitStatuses = []int{77}
	e.opts.Environment = []string{"RPMOSTREE_CLIENT_ID=update-agent"}
	s := e.stager(t, nil)
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		e.sys.mu.Lock()
		env := e.sys.units[stagingUnit].started.Environment
		e.sys.mu.Unlock()
		if strings.Join(env, " ") != "RPMOSTREE_CLIENT_ID=update-agent" {
			t.Errorf("environment %v", env)
		}
		return systemd.UnitStatus{ActiveState: "failed", SubState: "failed", Result: "exit-code", ExecMainCode: 1, ExecMainStatus: 77}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil || rep.Unit.ExecMainStatus != 77 {
		t.Errorf("exit 77: %v %+v", err, rep.Unit)
	}
	e.assertUndone(t)
	// Any other status still fails.
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		return systemd.UnitStatus{ActiveState: "failed", SubState: "failed", Result: "exit-code", ExecMainCode: 1, ExecMainStatus: 78}, nil
	}
	if _, err := s.Run(context.Background(), argv); err == nil {
		t.Error("exit 78 accepted")
	}
}

func TestRunCancelStopsUnitAndUndoes(t *testing.T) {
	e := newEnv(t)
	s := e.stager(t, nil)
	started := make(chan struct{})
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		close(started)
		<-ctx.Done()
		return systemd.UnitStatus{}, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := s.Run(ctx, argv)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	if e.sys.called("Stop "+stagingUnit) == 0 {
		t.Error("staging unit not stopped on abort")
	}
	e.assertUndone(t)
}

func TestRunTimeout(t *testing.T) {
	e := newEnv(t)
	e.opts.Timeout = 50 * time.Millisecond
	s := e.stager(t, nil)
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		<-ctx.Done()
		return systemd.UnitStatus{}, context.Cause(ctx)
	}
	_, err := s.Run(context.Background(), argv)
	if err == nil || !strings.Contains(err.Error(), "longer than 50ms") {
		t.Errorf("err %v", err)
	}
	e.assertUndone(t)
}

func TestRunSetupFailuresUndo(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(e *env)
		want   string
	}{
		{"scheduler", func(e *env) { e.sched.applyErr = errors.New("scheduler bfq not offered by vdb") }, "not offered"},
		{"fsync", func(e *env) { e.ostree.failSet = true }, "permission denied"},
		{"reload", func(e *env) { e.sys.failOn["Reload"] = errors.New("access denied") }, "access denied"},
		{"start", func(e *env) { e.sys.failOn["StartTransient "+stagingUnit] = errors.New("unit exists") }, "unit exists"},
		{"no disk", func(e *env) { e.opts.Paths = []string{"/nodisk"} }, "no block device"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.break_(e)
			s := e.stager(t, nil)
			_, err := s.Run(context.Background(), argv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			e.sys.failOn = map[string]error{} // reload works again for the undo check
			if tc.name == "reload" {
				// The first undo's reload failed too: the journal stays and
				// Recover finishes the job.
				if _, err := os.Stat(filepath.Join(e.stateDir, "staging-undo.json")); err != nil {
					t.Fatalf("journal not kept after a failed undo: %v", err)
				}
				if err := e.stager(t, nil).Recover(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if tc.name == "no disk" {
				e.sched.restores = 1 // nothing was applied
			}
			e.assertUndone(t)
		})
	}
}

func TestOneStagingAtATime(t *testing.T) {
	e := newEnv(t)
	running := make(chan struct{})
	release := make(chan struct{})
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		close(running)
		<-release
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	done := make(chan error, 1)
	go func() { _, err := e.stager(t, nil).Run(context.Background(), argv); done <- err }()
	<-running
	// Another process (stage-once beside the daemon) must neither stage
	// nor "recover" the running staging.
	other := e.stager(t, nil)
	if _, err := other.Run(context.Background(), argv); !errors.Is(err, ErrBusy) {
		t.Errorf("second Run: %v, want ErrBusy", err)
	}
	if err := other.Recover(context.Background()); !errors.Is(err, ErrBusy) {
		t.Errorf("Recover during a staging: %v, want ErrBusy", err)
	}
	if _, err := os.Stat(systemd.ControlFile(e.controlDir, daemonUnit, "IOWeight")); err != nil {
		t.Errorf("the running staging's daemon policy was undone: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.assertUndone(t)
	if err := other.Recover(context.Background()); err != nil {
		t.Errorf("Recover after the staging: %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	e := newEnv(t)
	for _, mod := range []func(o *Options){
		func(o *Options) { o.StateDir = "" },
		func(o *Options) { o.Policy.IOWeight = 20000 },
		func(o *Options) {
			o.Guard = GuardOptions{Enabled: true, Options: guard.Options{Config: guard.Config{FreezeFactor: 0.5}}}
		},
	} {
		o := e.opts
		mod(&o)
		if _, err := New(o, Deps{Systemd: e.sys, Runner: e.ostree}); err == nil {
			t.Errorf("accepted %+v", o)
		}
	}
	s := e.stager(t, nil)
	if _, err := s.Run(context.Background(), nil); err == nil {
		t.Error("empty argv accepted")
	}
}

// The guard thaws on its way out, but when that fails the window's undo
// must still thaw: the journal goes with the undo, and nothing would thaw
// rpm-ostreed afterwards.
func TestUndoThawsWhatTheGuardLeftFrozen(t *testing.T) {
	e := newEnv(t)
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		e.sys.mu.Lock()
		e.sys.units[daemonUnit].frozen = true
		e.sys.mu.Unlock()
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	if _, err := e.stager(t, fakeDaemon{idle: false}).Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	e.assertUndone(t)
}

package stage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/systemd"
)

const (
	stagingUnit = "update-agent-staging.service"
	daemonUnit  = "rpm-ostreed.service"
	etcdUnit    = "etcd.service"
)

var argv = []string{"/usr/bin/rpm-ostree", "upgrade", "--lock-finalization"}

type env struct {
	sys                           *fakeSystemd
	sched                         *fakeScheduler
	ostree                        *fakeOstree
	unitDir, controlDir, stateDir string
	opts                          Options
	now                           func() time.Time // nil: time.Now
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{
		sched:      &fakeScheduler{},
		ostree:     &fakeOstree{conf: map[string]string{}},
		unitDir:    filepath.Join(root, "run/systemd/system"),
		controlDir: filepath.Join(root, "run/systemd/system.control"),
		stateDir:   filepath.Join(root, "var/lib/update-agent"),
	}
	e.sys = newFakeSystemd(e.controlDir)
	for _, u := range []string{daemonUnit, etcdUnit} {
		e.sys.unit(u).active, e.sys.unit(u).sub = "active", "running"
	}
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	nice := 10
	e.opts = Options{
		DaemonUnit: daemonUnit,
		Policy: systemd.Policy{IOSchedulingClass: "idle", IOWeight: 10, CPUWeight: "idle", Nice: &nice,
			MemoryHigh: 256 << 20},
		WriteBandwidthMax: 20_000_000,
		Paths:             []string{"/var"},
		Scheduler:         "bfq",
		NrRequests:        16,
		PerObjectFsync:    true,
		Repo:              "/ostree/repo",
		EtcdUnit:          etcdUnit,
		EtcdLatencyTarget: 25 * time.Millisecond,
		Timeout:           time.Minute,
		StateDir:          e.stateDir,
		RuntimeUnitDir:    e.unitDir,
		RuntimeControlDir: e.controlDir,
		Log:               slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	return e
}

func (e *env) stager(t *testing.T, d Daemon) *Stager {
	t.Helper()
	s, err := New(e.opts, Deps{Systemd: e.sys, Runner: e.ostree, Daemon: d, Scheduler: e.sched, Now: e.now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) dropIn() string { return systemd.DropInPath(e.unitDir, daemonUnit, DropInName) }

func (e *env) assertDropIn(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(e.dropIn())
	if err != nil {
		t.Errorf("drop-in missing while staging: %v", err)
	}
	for _, l := range []string{"IOSchedulingClass=idle", "IOWeight=10", "CPUWeight=idle", "Nice=10", "MemoryHigh=268435456", "IOWriteBandwidthMax=/dev/vdb 20000000"} {
		if !strings.Contains(string(b), l+"\n") {
			t.Errorf("drop-in lacks %s:\n%s", l, b)
		}
	}
}

// assertApplied checks the window's policy is in place (called while the
// staging unit runs). A daemon restarted for the window (or started in
// it) has the drop-in; a running one the cgroup half set live, without a
// drop-in or a daemon-reload.
func (e *env) assertApplied(t *testing.T, restartedDaemon bool) {
	t.Helper()
	if restartedDaemon {
		e.assertDropIn(t)
	} else {
		if _, err := os.Stat(e.dropIn()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a drop-in for the running daemon (%v): it would reach only its next start", err)
		}
		if n := e.sys.called("Reload"); n != 0 {
			t.Errorf("%d daemon-reloads for a running daemon, want 1 (the undo checks it is not frozen)", n)
		}
		e.sys.mu.Lock()
		props := e.sys.units[daemonUnit].props
		for _, n := range []string{"CPUWeight", "MemoryHigh", "IOWriteBandwidthMax"} {
			if _, ok := props[n]; !ok {
				t.Errorf("running daemon lacks the live %s: %+v", n, props)
			}
		}
		e.sys.mu.Unlock()
	}
	if e.ostree.conf[fsyncKey] != "true" {
		t.Errorf("per-object fsync not set while staging: %v", e.ostree.conf)
	}
	if strings.Join(e.sched.applied, ",") != "vdb" {
		t.Errorf("scheduler applied to %v", e.sched.applied)
	}
	e.sys.mu.Lock()
	defer e.sys.mu.Unlock()
	lt := e.sys.units[etcdUnit].props["IODeviceLatencyTargetUSec"]
	if len(lt.Devices) != 1 || lt.Devices[0] != (systemd.DeviceValue{Path: "/dev/vdb", Value: 25000}) {
		t.Errorf("etcd latency target %+v", lt)
	}
	su := e.sys.units[stagingUnit]
	if su == nil || su.started == nil {
		t.Fatal("staging unit not started")
	}
	p := su.started.Policy
	if p.IOSchedulingClass != "idle" || p.IOWeight != 10 || p.CPUWeight != "idle" || len(p.IOWriteBandwidthMax) != 1 || su.started.KillSignal != 2 {
		t.Errorf("staging unit policy %+v", su.started)
	}
	if strings.Join(su.started.Argv, " ") != strings.Join(argv, " ") {
		t.Errorf("argv %v", su.started.Argv)
	}
	if !restartedDaemon {
		if w := e.sys.units[daemonUnit].props["IOWeight"]; w.Uint != 10 {
			t.Errorf("busy daemon did not get the runtime IOWeight: %+v", w)
		}
	}
}

// assertUndone checks that nothing of the window is left.
func (e *env) assertUndone(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(e.dropIn()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("drop-in left: %v", err)
	}
	filepath.WalkDir(e.controlDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("runtime control file left: %s", p)
		}
		return nil
	})
	if e.sched.applied != nil || e.sched.restores == 0 {
		t.Errorf("scheduler not restored (applied %v, restores %d)", e.sched.applied, e.sched.restores)
	}
	if v, ok := e.ostree.conf[fsyncKey]; ok {
		t.Errorf("per-object fsync left set: %q", v)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "staging-undo.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("undo journal left: %v", err)
	}
	e.sys.mu.Lock()
	defer e.sys.mu.Unlock()
	if lt := e.sys.units[etcdUnit].props["IODeviceLatencyTargetUSec"]; len(lt.Devices) != 0 {
		t.Errorf("etcd latency target left: %+v", lt)
	}
	if w, ok := e.sys.units[daemonUnit].props["IOWeight"]; ok && w.Uint != ^uint64(0) {
		t.Errorf("daemon IOWeight left at %d", w.Uint)
	}
	for name, u := range e.sys.units {
		if u.frozen {
			t.Errorf("%s left frozen", name)
		}
	}
	if u, ok := e.sys.units[stagingUnit]; ok {
		t.Errorf("staging unit not released: %+v", u)
	}
}

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

func TestRecoverAfterCrash(t *testing.T) {
	e := newEnv(t)
	s := e.stager(t, nil)
	running := make(chan struct{})
	release := make(chan struct{})
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		close(running)
		<-release
		return systemd.UnitStatus{}, errors.New("the old process is gone")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.Run(ctx, argv) }()
	<-running
	// The agent "dies" here, with the guard having frozen both units; the
	// kernel drops a dead process's lock.
	s.held.Close()
	e.sys.mu.Lock()
	e.sys.units[stagingUnit].frozen = true
	e.sys.units[daemonUnit].frozen = true
	e.sys.mu.Unlock()

	// The next process: a new Stager, same state dir.
	s2 := e.stager(t, nil)
	if err := s2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.sys.called("Thaw "+stagingUnit) == 0 || e.sys.called("Thaw "+daemonUnit) == 0 || e.sys.called("Stop "+stagingUnit) == 0 {
		t.Errorf("recover did not thaw and stop: %v", e.sys.calls)
	}
	e.assertUndone(t)
	if err := s2.Recover(context.Background()); err != nil {
		t.Errorf("second recover: %v", err)
	}
	close(release)
	cancel()
	wg.Wait()
}

// slowEtcd reports WAL fsyncs of 50ms: the guard must pace.
type slowEtcd struct {
	mu sync.Mutex
	n  uint64
}

func (s *slowEtcd) Read(context.Context) (guard.Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += 50
	h := guard.Histogram{Bounds: []float64{0.001, 0.016, 0.064, 1e308}, Counts: []uint64{0, 0, s.n, s.n}}
	return guard.Reading{At: time.Now(), Hists: map[string]guard.Histogram{guard.MetricWALFsync: h}}, nil
}

func TestRunWithGuardPacesBothUnits(t *testing.T) {
	e := newEnv(t)
	e.opts.Guard = GuardOptions{
		Enabled: true,
		Options: guard.Options{LearnFor: -1, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond,
			Baseline: guard.Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}},
			Config:   guard.Config{MinFreeze: 20 * time.Millisecond, MaxFreeze: 60 * time.Millisecond}},
		Source: &slowEtcd{},
	}
	s := e.stager(t, nil)
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		deadline := time.Now().Add(5 * time.Second)
		for e.sys.called("Freeze "+daemonUnit) < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Guarded || rep.Guard.Freezes < 2 || rep.Guard.ForcedThaws < 1 {
		t.Errorf("guard stats %+v", rep)
	}
	if e.sys.called("Freeze "+stagingUnit) < 2 {
		t.Errorf("staging unit not paced: %v", e.sys.calls)
	}
	e.assertUndone(t)
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

// A journal that does not parse names nothing, but the units this stager
// freezes, its drop-in and the scheduler's own record are known: it is set
// aside (doctor fails on it) and those are undone, so a bad file wedges no
// recovery; the next one finds nothing to do.
func TestRecoverSetsAsideUnreadableJournal(t *testing.T) {
	e := newEnv(t)
	e.sys.units[daemonUnit].frozen = true
	e.sched.applied = []string{"vdb"} // the window's scheduler still on the disk
	if err := os.MkdirAll(e.stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(e.stateDir, "staging-undo.json")
	if err := os.WriteFile(journal, []byte(`{"staging_unit": "upd`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(e.dropIn()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.dropIn(), []byte("[Service]\nIOWeight=10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := e.stager(t, nil)
	if err := s.Recover(context.Background()); err != nil {
		t.Fatalf("recover with an unreadable journal: %v", err)
	}
	if e.sys.units[daemonUnit].frozen {
		t.Errorf("%s left frozen: %v", daemonUnit, e.sys.calls)
	}
	if _, err := os.Stat(e.dropIn()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("drop-in left: %v", err)
	}
	if e.sched.restores != 1 {
		t.Errorf("scheduler restored %d times, want 1", e.sched.restores)
	}
	aside, err := atomicfile.SetAsideIn(e.stateDir)
	if err != nil || len(aside) != 1 || !strings.HasPrefix(aside[0], journal+".corrupt-") {
		t.Fatalf("set aside: %v, %v", aside, err)
	}
	if b, _ := os.ReadFile(aside[0]); string(b) != `{"staging_unit": "upd` {
		t.Errorf("set-aside content %q", b)
	}
	if _, err := os.Stat(journal); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("journal still there: %v", err)
	}
	if err := s.Recover(context.Background()); err != nil {
		t.Errorf("the next recovery: %v", err)
	}
}

// blockedDaemon is rpm-ostree asked while rpm-ostreed is frozen: it never
// answers (here: it fails the test instead of hanging).
type blockedDaemon struct {
	t   *testing.T
	sys *fakeSystemd
}

func (d blockedDaemon) Idle(context.Context) (bool, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	if d.sys.units[daemonUnit].frozen {
		d.t.Error("rpm-ostree asked while rpm-ostreed is frozen: it would never answer")
		return false, errors.New("frozen")
	}
	return true, nil
}

// A process killed while the guard had both units frozen: what the next
// start runs first thaws them before anything asks rpm-ostree, and undoes
// the window (the daemon restarted to take the policy is restarted again).
func TestRecoverAtStartAfterKillDuringFreeze(t *testing.T) {
	e := newEnv(t)
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		<-ctx.Done()
		return systemd.UnitStatus{}, ctx.Err()
	}
	// What the killed process left: its journal (written before each
	// change), the policy in place, both units frozen by the guard.
	e.opts.RestartIdleDaemon = true
	s := e.stager(t, fakeDaemon{idle: true})
	j := &journal{}
	if err := s.applyDaemonPolicy(context.Background(), j, e.opts.Policy); err != nil {
		t.Fatal(err)
	}
	j.StagingUnit = stagingUnit
	if err := s.saveJournal(j); err != nil {
		t.Fatal(err)
	}
	if err := e.sys.StartTransient(context.Background(), systemd.TransientService{Name: stagingUnit, Argv: argv}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{stagingUnit, daemonUnit} {
		if err := e.sys.Freeze(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	if !j.DaemonRestarted {
		t.Fatal("setup: the idle daemon was not restarted to take the policy")
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s2 := e.stager(t, blockedDaemon{t: t, sys: e.sys})
	RecoverAtStart(context.Background(), log, s2.Recover)
	e.sys.mu.Lock()
	frozen := e.sys.units[daemonUnit].frozen
	e.sys.mu.Unlock()
	if frozen {
		t.Fatalf("%s still frozen after RecoverAtStart: %v", daemonUnit, e.sys.calls)
	}
	if _, err := os.Stat(e.dropIn()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("drop-in left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "staging-undo.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("undo journal left: %v", err)
	}
	if e.sys.called("Stop "+stagingUnit) == 0 || e.sys.called("Restart "+daemonUnit) != 2 {
		t.Errorf("the staging unit was not stopped or the daemon not restarted without the policy: %v", e.sys.calls)
	}
}

// Another process staging on the host is not a failure at start.
func TestRecoverAtStartBusyAndBounded(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewTextHandler(&b, nil))
	RecoverAtStart(context.Background(), log, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("recover at start has no deadline: a hung systemd would hold the start forever")
		}
		return fmt.Errorf("recovering: %w", ErrBusy)
	})
	if !strings.Contains(b.String(), "level=INFO") || !strings.Contains(b.String(), "another process stages") {
		t.Errorf("busy logged as %q", b.String())
	}
}

// After a reboot, the journal's runtime records describe a boot that is
// gone: its units, frozen state, runtime properties and /run drop-in went
// with it. They are dropped, not set on this boot's units; what persists
// (the repo's fsync setting) is still restored.
func TestRecoverAfterRebootDropsRuntimeRecords(t *testing.T) {
	e := newEnv(t)
	boot := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(boot, []byte("boot-2\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	e.opts.BootIDPath = boot
	e.ostree.conf[fsyncKey] = "true"
	// This boot's own setting on etcd's unit, not the staging's.
	e.sys.units[etcdUnit].props["IOWeight"] = systemd.SavedProp{Name: "IOWeight", Uint: 50}
	s := e.stager(t, fakeDaemon{idle: true})
	j := &journal{BootID: "boot-1", StagingUnit: stagingUnit, DaemonUnit: daemonUnit, DaemonRestarted: true,
		DropIn:  e.dropIn(),
		Runtime: []runtimeChange{{Unit: etcdUnit, Old: []systemd.SavedProp{{Name: "IOWeight", Uint: 100}}}},
		Fsync:   &fsyncChange{Repo: "/ostree/repo"}}
	if err := s.saveJournal(j); err != nil {
		t.Fatal(err)
	}
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.sys.called("SetRuntime") + e.sys.called("Restart") + e.sys.called("Stop"); n != 0 {
		t.Errorf("an earlier boot's runtime records were applied: %v", e.sys.calls)
	}
	if w := e.sys.units[etcdUnit].props["IOWeight"].Uint; w != 50 {
		t.Errorf("etcd's IOWeight %d, want this boot's 50", w)
	}
	if v, ok := e.ostree.conf[fsyncKey]; ok {
		t.Errorf("per-object fsync (persistent) not restored: %q", v)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "staging-undo.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("undo journal left: %v", err)
	}
}

// watchingEtcd is a calm etcd that records, at each read, what the stager
// had changed by then.
type watchingEtcd struct {
	mu      sync.Mutex
	n       uint64
	e       *env
	changed []int // changes seen at each read
}

func (w *watchingEtcd) Read(context.Context) (guard.Reading, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.e.sched.mu.Lock()
	changes := len(w.e.sched.applied)
	w.e.sched.mu.Unlock()
	changes += w.e.sys.called("SetRuntime") + w.e.sys.called("Reload") + w.e.sys.called("Restart") + len(w.e.ostree.conf)
	w.changed = append(w.changed, changes)
	w.n += 50
	h := guard.Histogram{Bounds: []float64{0.001, 0.002, 0.004, 1e308}, Counts: []uint64{0, w.n, w.n, w.n}}
	return guard.Reading{At: time.Now(), Hists: map[string]guard.Histogram{guard.MetricWALFsync: h}}, nil
}

func TestRunLearnsBeforeChangingAnything(t *testing.T) {
	e := newEnv(t)
	w := &watchingEtcd{e: e}
	e.opts.Guard = GuardOptions{Enabled: true, Source: w,
		Options: guard.Options{LearnFor: 30 * time.Millisecond, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond}}
	rep, err := e.stager(t, nil).Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.changed) < 2 || w.changed[0] != 0 || w.changed[1] != 0 {
		t.Errorf("changes seen by the learning reads %v, want none: the baseline must be learned before the window opens", w.changed)
	}
	if rep.Baseline != "learned before the window" || rep.Setup <= 0 {
		t.Errorf("report baseline %q setup %s", rep.Baseline, rep.Setup)
	}
	e.assertUndone(t)
}

type fakeBaseline struct {
	mu             sync.Mutex
	rec            guard.Rolling
	paused, resume int
}

func (f *fakeBaseline) Record() guard.Rolling { return f.rec }
func (f *fakeBaseline) Pause() func() {
	f.mu.Lock()
	f.paused++
	f.mu.Unlock()
	return func() { f.mu.Lock(); f.resume++; f.mu.Unlock() }
}

func TestRunUsesAFreshRollingBaseline(t *testing.T) {
	h := guard.Histogram{Bounds: []float64{0.001, 0.002, 0.004, math.Inf(1)}, Counts: []uint64{0, 100, 100, 100}}
	for _, c := range []struct {
		name string
		age  time.Duration
		want string
	}{
		{"fresh", 2 * time.Minute, "rolling, 2m0s old"},
		{"stale", time.Hour, "learned before the window"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			w := &watchingEtcd{e: e}
			rec := guard.Rolling{}.Add(time.Now().Add(-c.age), time.Minute, map[string]guard.Histogram{guard.MetricWALFsync: h}, -1, 30*time.Minute)
			fb := &fakeBaseline{rec: rec}
			e.opts.Baseline = fb
			e.opts.Guard = GuardOptions{Enabled: true, Source: w,
				Options: guard.Options{LearnFor: 30 * time.Millisecond, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond}}
			rep, err := e.stager(t, nil).Run(context.Background(), argv)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Baseline != c.want {
				t.Errorf("baseline source %q, want %q", rep.Baseline, c.want)
			}
			if fb.paused != 1 || fb.resume != 1 {
				t.Errorf("rolling baseline paused %d, resumed %d times; want once each", fb.paused, fb.resume)
			}
		})
	}
}

// autoRate sets the write rate to "auto" with a guard that always sees
// etcd slow, on a fake sysfs and cgroup tree; it returns the staging
// unit's io.max.
func (e *env) autoRate(t *testing.T) (ioMax string) {
	e.opts.WriteBandwidthMax = 0
	e.opts.WriteRateAuto = true
	e.opts.Guard = GuardOptions{
		Enabled: true,
		Options: guard.Options{LearnFor: -1, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond,
			Baseline: guard.Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}},
			Config:   guard.Config{MinFreeze: 20 * time.Millisecond, MaxFreeze: 60 * time.Millisecond}},
		Source: &slowEtcd{},
	}
	e.opts.SysRoot = t.TempDir()
	writeCgroup(t, e.opts.SysRoot, stagingUnit, 10*mib, 8*mib)
	os.MkdirAll(filepath.Join(e.opts.SysRoot, "block/vdb"), 0o755)
	os.WriteFile(filepath.Join(e.opts.SysRoot, "block/vdb/dev"), []byte("252:16\n"), 0o644)
	return filepath.Join(e.opts.SysRoot, "fs/cgroup/system.slice", stagingUnit, "io.max")
}

func TestRunAutoWriteRatePacesBothUnits(t *testing.T) {
	e := newEnv(t)
	ioMax := e.autoRate(t)
	e.opts.WriteRate = guard.RateConfig{Min: 1_000_000} // below the default floor (the start rate)
	s := e.stager(t, fakeDaemon{idle: false})
	var staged string
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			b, _ := os.ReadFile(ioMax)
			// etcd is slow: the rate is cut from the 4 MB/s start.
			if staged = string(b); staged != "" && staged != "252:16 wbps=4000000 wiops=244" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if staged != "252:16 wbps=2000000 wiops=122" {
		t.Errorf("staging unit's io.max %q, want the cut rate 252:16 wbps=2000000 wiops=122", staged)
	}
	// The daemon's IOPS cap follows its rate (and was put back: undone).
	if e.sys.called("SetRuntime "+daemonUnit+" IOWriteBandwidthMax,IOWriteIOPSMax") == 0 {
		t.Errorf("the daemon's IOPS cap never followed the rate: %v", e.sys.calls)
	}
	// The daemon through systemd (journaled); the staging unit never, so
	// no control file outlives it.
	if e.sys.called("SetRuntime "+daemonUnit+" IOWriteBandwidthMax") == 0 || e.sys.called("SetRuntime "+stagingUnit) != 0 {
		t.Errorf("write rate calls: %v", e.sys.calls)
	}
	if rep.Guard.Rate == 0 || rep.Guard.RateCuts == 0 {
		t.Errorf("report has no rate cut: %+v", rep.Guard)
	}
	// Setting the rate reads the unit's cgroup, not its whole status (in
	// the guest that read was 5 % of stage-once's CPU).
	if n := e.sys.fullReads[stagingUnit]; n > 1 {
		t.Errorf("%d full status reads of the staging unit, want 1 (the undo checks it is not frozen)", n)
	}
	e.assertUndone(t)
}

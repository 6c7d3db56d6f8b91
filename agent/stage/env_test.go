package stage

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

package stage

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/systemd"
)

// iocostEnv is "auto" write rate with iocost on, over a temp-dir sysfs and
// cgroupfs whose root has io.cost.qos and io.cost.model (withKernel) or
// not; the guard's baseline has etcd's WAL fsync p99 at 32 ms.
func (e *env) iocostEnv(t *testing.T, withKernel bool) (qos, model string) {
	t.Helper()
	e.autoRate(t)
	e.opts.Guard.Options.Baseline = guard.Baseline{"wal_fsync": {P99: 32 * time.Millisecond, Median: 4 * time.Millisecond}}
	e.opts.IOCost = IOCostOptions{Mode: iocost.On, IOWeight: 1, EtcdIOWeight: 10000,
		Targets: iocost.Targets{Promise: 1.3, Default: 20 * time.Millisecond, Percentile: 95, VrateMin: 5, VrateMax: 150}}
	qos = filepath.Join(e.opts.SysRoot, "fs/cgroup/io.cost.qos")
	model = filepath.Join(e.opts.SysRoot, "fs/cgroup/io.cost.model")
	if withKernel {
		// A disk the controller was never set up on has no line.
		for _, f := range []string{qos, model} {
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return qos, model
}

// vdbModel is an operator's model for the staging disk.
const vdbModel = "vdb rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500"

// windowQoS is the QoS derived from the baseline, with the configured
// vrate bounds whatever the model's source (given, learned or the seed):
// a source-dependent bound starved staging under a given model that
// understated the disk.
const windowQoS = "252:16 enable=1 ctrl=user rpct=95.00 rlat=20800 wpct=95.00 wlat=20800 min=5.00 max=150.00"

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// assertIOCostWindow checks, while the staging unit runs, the QoS derived
// from the baseline (32 ms x 1.3 / 2), the low weights on the stager and
// the daemon, etcd's high weight, and no write cap on the stager.
func (e *env) assertIOCostWindow(t *testing.T, qos, want string) {
	t.Helper()
	if got := readString(t, qos); got != want {
		t.Errorf("io.cost.qos in the window %q, want %q", got, want)
	}
	e.sys.mu.Lock()
	defer e.sys.mu.Unlock()
	su := e.sys.units[stagingUnit]
	if su == nil || su.started == nil {
		t.Fatal("staging unit not started")
	}
	if p := su.started.Policy; p.IOWeight != 1 || len(p.IOWriteBandwidthMax) != 0 {
		t.Errorf("staging unit policy %+v, want IOWeight 1 and no write cap", p)
	}
	if w := e.sys.units[daemonUnit].props["IOWeight"]; w.Uint != 1 {
		t.Errorf("daemon IOWeight %+v, want 1", w)
	}
	if w := e.sys.units[etcdUnit].props["IOWeight"]; w.Uint != 10000 {
		t.Errorf("etcd IOWeight %+v, want 10000", w)
	}
}

func (e *env) assertIOCostUndone(t *testing.T, qos, model string) {
	t.Helper()
	if got := readString(t, qos); got != "252:16 enable=0 ctrl=auto" {
		t.Errorf("io.cost.qos after the window %q", got)
	}
	if got := readString(t, model); got != "252:16 ctrl=auto" {
		t.Errorf("io.cost.model after the window %q", got)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "iocost.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("iocost record left: %v", err)
	}
	e.sys.mu.Lock()
	defer e.sys.mu.Unlock()
	if w := e.sys.units[etcdUnit].props["IOWeight"]; w.Uint != ^uint64(0) {
		t.Errorf("etcd IOWeight left at %d", w.Uint)
	}
}

func TestRunUnderIOCost(t *testing.T) {
	e := newEnv(t)
	qos, model := e.iocostEnv(t, true)
	var logs lockedBuffer
	e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	s := e.stager(t, fakeDaemon{idle: false})
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		e.assertIOCostWindow(t, qos, windowQoS)
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.IOCost {
		t.Error("report says no iocost")
	}
	// iocost replaces the rate loop: no cap, no rate set on the daemon.
	if n := e.sys.called("SetRuntime " + daemonUnit + " IOWriteBandwidthMax"); n != 0 {
		t.Errorf("the daemon's write rate was set %d times", n)
	}
	for _, want := range []string{`latency_source="etcd's WAL fsync p99 before the window 32ms x 1.30 / 2"`,
		`model_source="seed (nothing learned on this disk yet)"`, `under iocost: no cap`,
		`msg="iocost weights for the staging window" staging_unit=` + stagingUnit, `stager_io_weight=1`, `etcd_io_weight=10000`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	e.assertIOCostUndone(t, qos, model)
	e.assertUndone(t)
}

// Without iocost in the kernel the rate loop paces, and the journal says
// why.
func TestRunWithoutIOCostFallsBackToTheRateLoop(t *testing.T) {
	e := newEnv(t)
	qos, _ := e.iocostEnv(t, false)
	ioMax := filepath.Join(e.opts.SysRoot, "fs/cgroup/system.slice", stagingUnit, "io.max")
	var logs lockedBuffer
	e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	s := e.stager(t, fakeDaemon{idle: false})
	var capped string
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		for end := time.Now().Add(5 * time.Second); capped == "" && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			b, _ := os.ReadFile(ioMax)
			capped = string(b)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if rep.IOCost || capped == "" {
		t.Errorf("iocost %v, staging unit's io.max %q: want the rate loop", rep.IOCost, capped)
	}
	if !strings.Contains(logs.String(), "iocost unavailable: the write rate loop paces staging instead") {
		t.Errorf("log does not say iocost is unavailable:\n%s", logs.String())
	}
	if _, err := os.Stat(qos); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("io.cost.qos written on a kernel without it: %v", err)
	}
	e.assertUndone(t)
}

// staging.iocost = "with-model" (the default): iocost goes on a disk
// staging.iocost_models gives a model for, with that model; without one
// for the window's disk the rate loop paces, the journal saying so only
// when models were given for other disks.
func TestRunWithModelOnly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		models  []string
		iocost  bool
		warning string
	}{
		{"a model for the disk", []string{vdbModel}, true, ""},
		{"a model for another disk", []string{strings.Replace(vdbModel, "vdb", "vda", 1)}, false,
			"staging.iocost_models has no model for the staging disks"},
		{"no model at all", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			qos, model := e.iocostEnv(t, true)
			e.opts.IOCost.Mode = iocost.WithModel
			e.opts.IOCost.Models = map[string]iocost.Model{}
			for _, l := range tc.models {
				d, m, err := iocost.ParseDiskModel(l)
				if err != nil {
					t.Fatal(err)
				}
				e.opts.IOCost.Models[d] = m
			}
			var logs lockedBuffer
			e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
			s := e.stager(t, fakeDaemon{idle: false})
			var inWindow string
			e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
				inWindow = readString(t, model)
				if tc.iocost {
					e.assertIOCostWindow(t, qos, windowQoS)
				}
				return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
			}
			rep, err := s.Run(context.Background(), argv)
			if err != nil {
				t.Fatal(err)
			}
			if rep.IOCost != tc.iocost {
				t.Errorf("iocost %v, want %v", rep.IOCost, tc.iocost)
			}
			wantModel := ""
			if tc.iocost {
				wantModel = "252:16 ctrl=user model=linear rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500"
				e.assertIOCostUndone(t, qos, model)
			} else if got := readString(t, qos); got != "" {
				t.Errorf("io.cost.qos written without iocost: %q", got)
			}
			if inWindow != wantModel {
				t.Errorf("io.cost.model in the window %q, want %q", inWindow, wantModel)
			}
			warned := strings.Contains(logs.String(), "level=WARN msg=\"staging.iocost_models")
			if (tc.warning != "") != warned || !strings.Contains(logs.String(), tc.warning) {
				t.Errorf("log, want warning %q:\n%s", tc.warning, logs.String())
			}
			e.assertUndone(t)
		})
	}
}

// A process killed in the window leaves iocost on and etcd's weight high:
// the next process's Recover puts both back from the records alone.
func TestRecoverIOCostAfterCrash(t *testing.T) {
	e := newEnv(t)
	qos, model := e.iocostEnv(t, true)
	s := e.stager(t, fakeDaemon{idle: false})
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
	e.assertIOCostWindow(t, qos, windowQoS)
	s.held.Close() // the kernel drops a dead process's lock

	s2 := e.stager(t, fakeDaemon{idle: false})
	if err := s2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.assertIOCostUndone(t, qos, model)
	close(release)
	cancel()
	wg.Wait()
}

// A crash between the controller's record and the journal's leaves only
// the controller's: Recover restores it without a journal.
func TestRecoverIOCostWithoutJournal(t *testing.T) {
	e := newEnv(t)
	qos, model := e.iocostEnv(t, true)
	s := e.stager(t, nil)
	if err := s.iocost.Apply([]iocost.DiskPlan{{Disk: "vdb", QoS: iocost.QoS{Enable: true, User: true, RPct: 95, WPct: 95, RLat: 1, WLat: 1, Min: 5, Max: 150}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.stager(t, nil).Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, qos); got != "252:16 enable=0 ctrl=auto" {
		t.Errorf("io.cost.qos after recover %q", got)
	}
	if got := readString(t, model); got != "252:16 ctrl=auto" {
		t.Errorf("io.cost.model after recover %q", got)
	}
}

// lockedBuffer is a log sink for the guard's goroutines and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

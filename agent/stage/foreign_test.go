package stage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/guard"
)

var zincatiDeploy = Foreign{Method: "Deploy", Sender: ":1.42", Path: "/org/projectatomic/rpmostree1/fedora"}

// waitOpen waits until the foreign window's setup is done (per-object
// fsync is its last step).
func (e *env) waitOpen(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.ostree.mu.Lock()
		v := e.ostree.conf[fsyncKey]
		e.ostree.mu.Unlock()
		if v == "true" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the foreign window did not open")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// paceForeign runs PaceForeign until the returned end is called.
func paceForeign(s *Stager, ctx context.Context) (end func() (Report, error)) {
	ended := make(chan struct{})
	type result struct {
		rep Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := s.PaceForeign(ctx, zincatiDeploy, ended)
		done <- result{rep, err}
	}()
	var once sync.Once
	return func() (Report, error) {
		once.Do(func() { close(ended) })
		r := <-done
		return r.rep, r.err
	}
}

// While somebody else's transaction runs, rpm-ostreed (which writes for
// it) has the whole policy live, etcd its latency target, the disks their
// queue, the repo per-object fsync; nothing is started, restarted, stopped
// or cancelled (even with restart_idle_daemon and a daemon that looks
// idle), and all of it is undone once the transaction is gone.
func TestPaceForeignPolicyDuringTransactionUndoneAfter(t *testing.T) {
	e := newEnv(t)
	e.opts.RestartIdleDaemon = true
	s := e.stager(t, fakeDaemon{idle: true})
	end := paceForeign(s, context.Background())
	e.waitOpen(t)

	e.sys.mu.Lock()
	props := e.sys.units[daemonUnit].props
	for _, n := range []string{"CPUWeight", "MemoryHigh", "IOWeight", "IOWriteBandwidthMax"} {
		if _, ok := props[n]; !ok {
			t.Errorf("rpm-ostreed lacks the live %s during the foreign transaction: %+v", n, props)
		}
	}
	if lt := e.sys.units[etcdUnit].props["IODeviceLatencyTargetUSec"]; len(lt.Devices) != 1 {
		t.Errorf("etcd latency target %+v", lt)
	}
	_, staging := e.sys.units[stagingUnit]
	e.sys.mu.Unlock()
	if staging {
		t.Error("a staging unit was started for a foreign transaction")
	}
	e.sched.mu.Lock()
	if len(e.sched.applied) != 1 {
		t.Errorf("scheduler applied to %v", e.sched.applied)
	}
	e.sched.mu.Unlock()
	var j journal
	if found, err := atomicfile.ReadJSON(filepath.Join(e.stateDir, "staging-undo.json"), &j); err != nil || !found {
		t.Fatalf("no undo journal during the foreign window: %v", err)
	}
	if j.Foreign == nil || j.Foreign.Method != "Deploy" || j.StagingUnit != "" || j.DaemonUnit != daemonUnit {
		t.Errorf("journal %+v", j)
	}

	rep, err := end()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Disks) != 1 {
		t.Errorf("report %+v", rep)
	}
	for _, c := range []string{"StartTransient", "Restart", "Stop"} {
		if e.sys.called(c) != 0 {
			t.Errorf("%s called for a foreign transaction: %v", c, e.sys.calls)
		}
	}
	e.assertUndone(t)
}

// The guard's brake freezes rpm-ostreed, the one unit writing for the
// foreign transaction, and never a staging unit.
func TestPaceForeignGuardFreezesTheDaemon(t *testing.T) {
	e := newEnv(t)
	e.opts.Guard = GuardOptions{
		Enabled: true,
		Options: guard.Options{LearnFor: -1, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond,
			Baseline: guard.Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}},
			Config:   guard.Config{MinFreeze: 20 * time.Millisecond, MaxFreeze: 60 * time.Millisecond}},
		Source: &slowEtcd{},
	}
	s := e.stager(t, nil)
	end := paceForeign(s, context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for e.sys.called("Freeze "+daemonUnit) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	rep, err := end()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Guarded || rep.Guard.Freezes < 2 {
		t.Errorf("guard stats %+v", rep)
	}
	if n := e.sys.called("Freeze " + stagingUnit); n != 0 {
		t.Errorf("froze the staging unit %d times in a foreign window", n)
	}
	e.assertUndone(t)
}

// A process killed during a foreign window (the guard had rpm-ostreed
// frozen): the next start thaws it and undoes the policy, and stops or
// cancels nothing.
func TestRecoverUndoesAKilledForeignWindow(t *testing.T) {
	e := newEnv(t)
	// The killed agent's systemd calls fail from the kill on: its window's
	// goroutines run on in the test, and one still setting the daemon's
	// memory bound after the recovery left a control file behind it (a
	// dead process writes nothing).
	dead := &killedSystemd{Systemd: e.sys}
	s, err := New(e.opts, Deps{Systemd: dead, Runner: e.ostree, Scheduler: e.sched, Now: e.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	end := paceForeign(s, ctx)
	e.waitOpen(t)
	dead.killed.Store(true)
	s.held.Close() // the kernel drops a dead process's lock
	if err := e.sys.Freeze(context.Background(), daemonUnit); err != nil {
		t.Fatal(err)
	}
	// The state directory as the kill left it: the dead window's memory
	// pacer wrote the undo journal after the recovery removed it (1 run in
	// 300 under load); the next start reads a copy it cannot reach.
	left := filepath.Join(t.TempDir(), "state")
	if err := os.CopyFS(left, os.DirFS(e.stateDir)); err != nil {
		t.Fatal(err)
	}
	e.stateDir, e.opts.StateDir = left, left

	s2 := e.stager(t, nil)
	if err := s2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.sys.mu.Lock()
	frozen := e.sys.units[daemonUnit].frozen
	e.sys.mu.Unlock()
	if frozen {
		t.Errorf("rpm-ostreed left frozen: %v", e.sys.calls)
	}
	if e.sys.called("Stop") != 0 || e.sys.called("Restart") != 0 {
		t.Errorf("recovering a foreign window stopped or restarted a unit: %v", e.sys.calls)
	}
	e.assertUndone(t)
	cancel()
	end()
}

// The agent's own staging is paced already: a foreign window is refused
// while it runs.
func TestPaceForeignBusyWhileStaging(t *testing.T) {
	e := newEnv(t)
	s := e.stager(t, nil)
	unlock, err := s.lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ended := make(chan struct{})
	close(ended)
	if _, err := e.stager(t, nil).PaceForeign(context.Background(), zincatiDeploy, ended); !errors.Is(err, ErrBusy) {
		t.Errorf("err = %v, want ErrBusy", err)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "staging-undo.json")); err == nil {
		t.Error("an undo journal written by a refused foreign window")
	}
}

// The memory bound follows rpm-ostreed's own memory in a foreign window
// too, set through systemd (so undo sets it back), not written into its
// cgroup as a staging unit's is; it is unset after.
func TestPaceForeignMemoryHighFollowsTheDaemon(t *testing.T) {
	e := newEnv(t)
	e.opts.SysRoot = t.TempDir()
	writeCgroup(t, e.opts.SysRoot, daemonUnit, 400*mib, 50*mib)
	s := e.stager(t, nil)
	end := paceForeign(s, context.Background())
	var during uint64
	deadline := time.Now().Add(5 * time.Second)
	for during != 606*mib && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		e.sys.mu.Lock()
		during = e.sys.units[daemonUnit].props["MemoryHigh"].Uint
		e.sys.mu.Unlock()
	}
	if _, err := end(); err != nil {
		t.Fatal(err)
	}
	if during != 606*mib {
		t.Errorf("daemon MemoryHigh during the foreign transaction = %d MiB, want 606 (350 own + 256)", during/mib)
	}
	if b, err := os.ReadFile(filepath.Join(e.opts.SysRoot, "fs/cgroup/system.slice", daemonUnit, "memory.high")); err == nil {
		t.Errorf("memory.high written straight into rpm-ostreed's cgroup (%s): undo would not set it back", b)
	}
	e.sys.mu.Lock()
	after := e.sys.units[daemonUnit].props["MemoryHigh"].Uint
	e.sys.mu.Unlock()
	if after != ^uint64(0) {
		t.Errorf("daemon MemoryHigh after = %d, want it set back (unset)", after)
	}
	e.assertUndone(t)
}

// killedSystemd is a killed agent's systemd: every call after the kill
// fails.
type killedSystemd struct {
	Systemd
	killed atomic.Bool
}

func (k *killedSystemd) dead() error {
	if k.killed.Load() {
		return errors.New("killed")
	}
	return nil
}

func (k *killedSystemd) SetRuntime(ctx context.Context, unit string, props ...sd.Property) error {
	if err := k.dead(); err != nil {
		return err
	}
	return k.Systemd.SetRuntime(ctx, unit, props...)
}

func (k *killedSystemd) Freeze(ctx context.Context, unit string) error {
	if err := k.dead(); err != nil {
		return err
	}
	return k.Systemd.Freeze(ctx, unit)
}

func (k *killedSystemd) Thaw(ctx context.Context, unit string) error {
	if err := k.dead(); err != nil {
		return err
	}
	return k.Systemd.Thaw(ctx, unit)
}

func (k *killedSystemd) Reload(ctx context.Context) error {
	if err := k.dead(); err != nil {
		return err
	}
	return k.Systemd.Reload(ctx)
}

package stage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/systemd"
)

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

package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/state"
)

// harness runs engines, one process at a time, against one world and one
// state directory.
type harness struct {
	t     *testing.T
	w     *world
	dir   string
	clock *clockwork.FakeClock
	pol   Policy
	saves int           // saves made by the last process
	disk  Store         // the state directory, surviving processes
	gates Gates         // nil: NoGates
	host  Host          // nil: NoHost
	log   *slog.Logger  // nil: discarded
	step  time.Duration // the clock moves this much whenever the engine waits (0: an hour)
}

func newHarness(t *testing.T) *harness {
	pol := testPolicy()
	return &harness{t: t, w: newWorld(), dir: t.TempDir(), clock: clockwork.NewFakeClockAt(t0), pol: pol, disk: &memDisk{}}
}

// done: the cycle is over when the host runs the target and the engine
// idles with nothing held.
func (h *harness) done(s Snapshot) bool {
	return s.State.Phase == state.Idle && s.Action.Kind == ActWait && s.OS.Booted.Checksum == tgt.Checksum
}

// run starts one agent process (a new Engine from the record on disk) and
// returns when it is killed, the host reboots under it, or the cycle ends.
func (h *harness) run(store Store) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.w.mu.Lock()
	h.w.onFinalize = cancel // the host goes down: systemd stops the agent
	boot := h.w.bootID
	h.w.mu.Unlock()
	log := h.log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := New(Options{
		OS: h.w, Stager: h.w, Lock: h.w, Cluster: h.w, Hooks: h.w, Store: store, Gates: h.gates, Host: h.host,
		BootID: func() (string, error) { return boot, nil },
		Policy: h.pol, Clock: h.clock, Log: log,
		Rand: func() float64 { return 0.5 },
	})
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	// Let time pass whenever the engine waits, until the cycle is over.
	go func() {
		for ctx.Err() == nil {
			if err := h.clock.BlockUntilContext(ctx, 1); err != nil {
				return
			}
			if h.done(e.Snapshot()) {
				cancel()
				return
			}
			step := h.step
			if step == 0 {
				step = time.Hour
			}
			h.clock.Advance(step)
		}
	}()
	err := <-errc
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		h.t.Fatalf("engine did not finish: %+v", e.Snapshot())
	}
	return e.Snapshot(), err
}

func (h *harness) record() state.State {
	st, err := h.disk.Load()
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// untilDone restarts the agent (rebooting the host when finalize asked for
// it) until the cycle is over.
func (h *harness) untilDone() Snapshot {
	for i := 0; i < 10; i++ {
		if h.w.rebootPending {
			h.w.reboot(true)
		}
		snap, err := h.run(h.disk)
		if err != nil {
			h.t.Fatalf("agent failed: %v", err)
		}
		if h.done(snap) {
			return snap
		}
	}
	h.t.Fatalf("no complete cycle after 10 restarts: %+v", h.record())
	return Snapshot{}
}

func (h *harness) checkEnd() {
	t, w := h.t, h.w
	t.Helper()
	if len(w.violations) > 0 {
		t.Errorf("invariants broken:\n  %s", strings.Join(w.violations, "\n  "))
	}
	if w.booted != tgt.Checksum || w.staged != "" || len(w.leases) != 0 || w.policyApplied {
		t.Errorf("end: booted %q staged %q leases %v policy applied %v", w.booted, w.staged, w.leases, w.policyApplied)
	}
	st := h.record()
	if st.Phase != state.Idle || st.Queued || st.LeaseID != 0 || st.Locked != "" || len(st.Failures) != 0 {
		t.Errorf("end record: %+v", st)
	}
}

func TestFullCycle(t *testing.T) {
	for _, leader := range []bool{false, true} {
		t.Run(fmt.Sprintf("leader=%v", leader), func(t *testing.T) {
			h := newHarness(t)
			h.disk = state.Store{Dir: h.dir} // the real record, fsync and all
			h.w.leader = leader
			h.untilDone()
			h.checkEnd()
			if h.w.stages != 1 || h.w.finalizes != 1 || h.w.releases != 1 {
				t.Errorf("stages %d finalizes %d releases %d, want 1 each", h.w.stages, h.w.finalizes, h.w.releases)
			}
			if leader && h.w.leader {
				t.Error("rebooted while leading")
			}
		})
	}
}

// cycleSaves counts the records one clean cycle persists.
func cycleSaves(t *testing.T, leader bool) int {
	h := newHarness(t)
	h.w.leader = leader
	n := 0
	for i := 0; i < 3; i++ {
		if h.w.rebootPending {
			h.w.reboot(true)
		}
		ks := &killStore{Store: h.disk}
		snap, err := h.run(ks)
		if err != nil {
			t.Fatal(err)
		}
		n += ks.n
		if h.done(snap) {
			return n
		}
	}
	t.Fatal("clean cycle did not finish")
	return 0
}

// TestKillAtEveryStep kills the agent at every persisted step of a cycle,
// before and after the record reaches the disk, optionally with an
// unplanned reboot or an expired lease while it is down, and checks that a
// new process from the record finishes the cycle without breaking an
// invariant: no finalize without the slot, no second slot key while one is
// alive, no staged update left unlocked, the staging policy undone, no
// release after a reboot before the member is checked.
func TestKillAtEveryStep(t *testing.T) {
	for _, leader := range []bool{false, true} {
		n := cycleSaves(t, leader)
		if n < 8 {
			t.Fatalf("a cycle persisted only %d records", n)
		}
		for at := 1; at <= n; at++ {
			for _, written := range []bool{true, false} {
				for _, after := range []string{"restart", "unplanned reboot", "lease expired"} {
					name := fmt.Sprintf("leader=%v/save%02d/written=%v/%s", leader, at, written, after)
					t.Run(name, func(t *testing.T) {
						h := newHarness(t)
						h.w.leader = leader
						killed, left := false, at
						for i := 0; i < 3 && !killed; i++ {
							if h.w.rebootPending {
								h.w.reboot(true)
							}
							ks := &killStore{Store: h.disk, at: left, written: written}
							_, err := h.run(ks)
							killed = errors.Is(err, errKilled)
							left -= ks.n
						}
						if !killed {
							t.Fatal("never killed")
						}
						h.w.mu.Lock()
						if h.w.staged != "" && !h.w.locked && h.record().Phase != state.Finalizing {
							h.w.violate("killed with staged %s unlocked in phase %s", h.w.staged, h.record().Phase)
						}
						h.w.mu.Unlock()
						switch after {
						case "unplanned reboot":
							h.w.reboot(h.w.rebootPending)
						case "lease expired":
							h.w.expireLeases()
						}
						h.untilDone()
						h.checkEnd()
					})
				}
			}
		}
	}
}

// A kill halfway through staging leaves the I/O policy applied; the next
// process undoes it before anything else.
func TestKillDuringStaging(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.w.onStageStep = func() error { cancel(); return context.Canceled }
	e := New(Options{OS: h.w, Stager: h.w, Lock: h.w, Cluster: h.w, Hooks: h.w, Store: h.disk,
		BootID: func() (string, error) { return "boot-1", nil }, Policy: h.pol, Clock: h.clock,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.w.policyApplied || h.record().Phase != state.Staging {
		t.Fatalf("setup: policy applied %v, record %s", h.w.policyApplied, h.record().Phase)
	}
	h.w.onStageStep = nil
	h.untilDone()
	h.checkEnd()
}

// The "Staged deployment already unlocked" trap: staging onto an unlocked
// staged deployment does not lock it. The agent cleans up and stages again;
// it never loops: the target is set aside after MaxFailures.
func TestAlreadyUnlockedNeverLoops(t *testing.T) {
	h := newHarness(t)
	h.w.stageNoLock = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := New(Options{OS: h.w, Stager: h.w, Lock: h.w, Cluster: h.w, Hooks: h.w, Store: h.disk,
		BootID: func() (string, error) { return "boot-1", nil }, Policy: h.pol, Clock: h.clock,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go e.Run(ctx)
	for {
		if err := h.clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("timeout: %+v", e.Snapshot())
		}
		if s := e.Snapshot(); s.State.Failures[tgt.Checksum].SetAside {
			if !strings.Contains(s.Action.Reason, "set aside") {
				t.Errorf("status does not report the set-aside target: %q", s.Action.Reason)
			}
			break
		}
		h.clock.Advance(time.Hour)
	}
	cancel()
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.w.stages != h.pol.MaxFailures || h.w.finalizes != h.pol.MaxFailures {
		t.Errorf("stages %d finalizes %d, want %d each", h.w.stages, h.w.finalizes, h.pol.MaxFailures)
	}
	if h.w.staged != "" || len(h.w.leases) != 0 || len(h.w.violations) != 0 {
		t.Errorf("left staged %q leases %v; violations %v", h.w.staged, h.w.leases, h.w.violations)
	}
}

// A failed pre-reboot hook gives the slot back and keeps the staged update
// locked; with the hook fixed, the next attempt goes through.
func TestFailedHookReleasesSlot(t *testing.T) {
	h := newHarness(t)
	h.w.hookErr = errors.New("drain: timed out")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := New(Options{OS: h.w, Stager: h.w, Lock: h.w, Cluster: h.w, Hooks: h.w, Store: h.disk,
		BootID: func() (string, error) { return "boot-1", nil }, Policy: h.pol, Clock: h.clock,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	if err := h.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for e.Snapshot().State.Phase != state.Staged {
		h.clock.Advance(time.Minute)
		time.Sleep(time.Millisecond)
	}
	h.w.mu.Lock()
	if !h.w.locked || h.w.staged != tgt.Checksum || len(h.w.leases) != 0 || h.w.finalizes != 0 {
		t.Errorf("after a failed hook: staged %q locked %v leases %v finalizes %d", h.w.staged, h.w.locked, h.w.leases, h.w.finalizes)
	}
	h.w.hookErr = nil
	h.w.mu.Unlock()
	if f := e.Snapshot().State.Failures[tgt.Checksum]; f.Count != 1 || !strings.Contains(f.LastError, "drain") {
		t.Errorf("failure record %+v", f)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	h.untilDone()
	if h.w.stages != 1 {
		t.Errorf("staged %d times, want once (the locked update is kept)", h.w.stages)
	}
}

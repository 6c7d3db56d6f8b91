// Package engine runs the update flow as a crash-safe state machine:
//
//	check -> stage gently (locked) -> wait for a window -> take a reboot slot
//	(followers first) -> pre-reboot hooks -> tell the people on the host ->
//	wait for logged-in users -> re-check window, gates, leadership and quorum
//	-> fence the slot -> finalize-deployment (reboot) -> after boot: booted
//	is the target and the etcd member is healthy -> release the slot.
//
// Decide (decide.go) is the pure core; it dispatches through the phase x
// event table in flow.go, rendered in FLOW.md with the trace of a whole
// cycle. Engine persists each decision before acting on it and carries
// actions out through small ports (ports.go).
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/state"
)

// Metrics receives what the engine measures (agent/metrics implements it).
type Metrics interface {
	SetPhase(state.Phase)
	StagingDone(d time.Duration, err error)
	LockWaited(d time.Duration)
	LeaderMoved()
	Failed(step string)
}

// Options are the engine's ports and policy. OS, Stager and Store are
// required; the rest default to stand-ins for "not configured".
type Options struct {
	OS      OS
	Stager  Stager
	Lock    Lock    // default NoLock (locking disabled)
	Cluster Cluster // default NoCluster (no etcd member on this host)
	Hooks   Hooks   // default NoHooks
	Gates   Gates   // default NoGates
	Host    Host    // default NoHost
	Store   Store
	// BootID returns the current boot's ID (state.ReadBootID).
	BootID  func() (string, error)
	Policy  Policy
	Clock   clockwork.Clock
	Log     *slog.Logger
	Metrics Metrics
	// Status receives a one-line status (sd_notify STATUS=) on change.
	Status func(string)
	// Beat is called while the engine makes progress (watchdog).
	Beat func()
	// BeatInterval paces Beat during long actions and waits (default 5s).
	BeatInterval time.Duration
	// Rand feeds jitter (default math/rand/v2).
	Rand func() float64
}

// Snapshot is what `update-agent status` shows of the engine.
type Snapshot struct {
	State      state.State `json:"state"`
	Action     Action      `json:"action"`
	OS         OSStatus    `json:"os"`
	BootID     string      `json:"boot_id"`
	NextWindow time.Time   `json:"next_window,omitzero"`
	UpdateNow  bool        `json:"update_now_pending,omitempty"`
	At         time.Time   `json:"at"`
	// LastStaging and Position come from the ports (StagingReporter,
	// PositionReporter); Position only while waiting for a slot. Status
	// shows them in sections of their own.
	LastStaging *StagingReport `json:"-"`
	Position    *QueuePosition `json:"-"`
}

// Engine runs the flow. Create it with New; Run it once.
type Engine struct {
	o         Options
	log       *slog.Logger
	wake      chan struct{}
	recovered bool
	// finalized: when finalize-deployment succeeded in this process (a
	// monotonic reading; zero when not, or no longer, finalizing).
	finalized time.Time

	mu        sync.Mutex
	snap      Snapshot
	updateNow bool
	lastShown string
}

// New returns an engine; it reads nothing until Run.
func New(o Options) *Engine {
	if o.Lock == nil {
		o.Lock = NoLock{}
	}
	if o.Cluster == nil {
		o.Cluster = NoCluster{}
	}
	if o.Hooks == nil {
		o.Hooks = NoHooks{}
	}
	if o.Gates == nil {
		o.Gates = NoGates{}
	}
	if o.Host == nil {
		o.Host = NoHost{}
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.BootID == nil {
		o.BootID = func() (string, error) { return state.ReadBootID(state.BootIDPath) }
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.BeatInterval <= 0 {
		o.BeatInterval = 5 * time.Second
	}
	// Zero intervals would turn waits into busy loops.
	p := &o.Policy
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&p.RecheckInterval, 30 * time.Second}, {&p.CheckInterval, 15 * time.Minute},
		{&p.RebootTimeout, 10 * time.Minute}, {&p.WatchStaged, time.Minute}, {&p.Retry.Base, time.Minute}, {&p.Retry.Max, time.Hour},
	} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	return &Engine{o: o, log: o.Log, wake: make(chan struct{}, 1)}
}

// UpdateNow asks for a check (and staging) now; windows and the lock still
// apply. Safe from any goroutine.
func (e *Engine) UpdateNow() {
	e.mu.Lock()
	e.updateNow = true
	e.snap.UpdateNow = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Snapshot returns the latest decision and what it was based on.
func (e *Engine) Snapshot() Snapshot {
	e.mu.Lock()
	s := e.snap
	s.State = s.State.Clone()
	e.mu.Unlock()
	if r, ok := e.o.Stager.(StagingReporter); ok {
		s.LastStaging = r.LastStaging()
	}
	if r, ok := e.o.Lock.(PositionReporter); ok && s.State.Phase == state.WaitingSlot {
		s.Position = r.Position()
	}
	return s
}

// Run drives the flow until ctx ends. It returns nil on a clean stop and an
// error when it cannot go on safely (the record cannot be read or written).
// Cancelling ctx cancels the running action (staging is cancelled with
// SIGINT semantics by the stager); the record already names that step, so
// the next start resumes it.
func (e *Engine) Run(ctx context.Context) error {
	st, err := e.o.Store.Load()
	if err != nil {
		return err
	}
	bootID, err := e.o.BootID()
	if err != nil {
		return err
	}
	var ev Event = Started{}
	for ctx.Err() == nil {
		e.beat()
		obs, err := e.observe(ctx, bootID)
		if err != nil {
			e.show(st, Action{Kind: ActWait, Reason: err.Error()}, obs)
			e.log.Warn("cannot observe the host; retrying", "err", err, "state", st.Phase)
			e.wait(ctx, e.o.Clock.Now().Add(e.o.Policy.RecheckInterval))
			continue
		}
		if st.Phase != state.Finalizing {
			e.finalized = time.Time{}
		}
		if !e.finalized.IsZero() {
			obs.FinalizedHere, obs.RebootWait = true, e.o.Clock.Since(e.finalized)
		}
		next, act := Decide(st, ev, obs, e.o.Policy, e.o.Clock.Now())
		if _, ok := ev.(Checked); ok {
			e.consumeUpdateNow()
		}
		if !next.Equal(st) {
			if err := e.o.Store.Save(next); err != nil {
				return fmt.Errorf("persisting %s -> %s: %w", st.Phase, next.Phase, err)
			}
		}
		e.record(st, next, ev, act, obs)
		e.noticeTakenBack(st, next, bootID)
		st = next
		ev = e.do(ctx, st, act)
	}
	return nil
}

func (e *Engine) observe(ctx context.Context, bootID string) (Obs, error) {
	os, err := e.o.OS.Status(ctx)
	if err != nil {
		return Obs{BootID: bootID}, fmt.Errorf("reading rpm-ostree status: %w", err)
	}
	e.mu.Lock()
	now := e.updateNow
	e.mu.Unlock()
	return Obs{BootID: bootID, OS: os, Recovered: e.recovered, UpdateNow: now, Rand: e.o.Rand()}, nil
}

func (e *Engine) consumeUpdateNow() {
	e.mu.Lock()
	e.updateNow, e.snap.UpdateNow = false, false
	e.mu.Unlock()
}

// do carries out one action and returns its result as the next event.
func (e *Engine) do(ctx context.Context, st state.State, act Action) Event {
	o := e.o
	switch act.Kind {
	case ActWait:
		e.wait(ctx, act.Until)
		return Ticked{}
	case ActRecover:
		err := e.busy(ctx, func() error { return o.Stager.Recover(ctx) })
		e.recovered = err == nil
		return Recovered{Err: err}
	case ActCheck:
		var t *state.Target
		err := e.busy(ctx, func() (err error) { t, err = o.OS.Check(ctx); return err })
		return checked(t, err)
	case ActStage:
		// Announce before staging, not after: a leader deciding meanwhile
		// must already see that this node will want to reboot.
		if aerr := o.Lock.Announce(ctx, st.Target.Checksum); aerr != nil {
			e.log.Warn("announcing the pending update (a leader may reboot before this node)", "err", aerr)
		}
		start := o.Clock.Now()
		err := e.busy(ctx, func() error { return o.Stager.Stage(ctx, st.Target) })
		if o.Metrics != nil && ctx.Err() == nil {
			o.Metrics.StagingDone(o.Clock.Since(start), err)
		}
		if err != nil && ctx.Err() == nil {
			// A leader must not wait for an update that may never come.
			if werr := o.Lock.Withdraw(ctx); werr != nil {
				e.log.Warn("withdrawing the pending-update announcement", "err", werr)
			}
		}
		return StageDone{Err: err}
	case ActCleanup:
		return CleanedUp{Err: e.busy(ctx, func() error { return o.OS.Cleanup(ctx) })}
	case ActQueryOrder:
		var q QueueOrder
		err := e.busy(ctx, func() (err error) { q, err = o.Cluster.MayQueue(ctx); return err })
		return OrderQueried{QueueOrder: q, Err: err}
	case ActAcquire:
		// Announce again: a failure after staging withdrew the
		// announcement for the backoff.
		if aerr := o.Lock.Announce(ctx, st.Target.Checksum); aerr != nil {
			e.log.Warn("announcing the pending update (a leader may reboot before this node)", "err", aerr)
		}
		start := o.Clock.Now()
		var id int64
		err := e.busy(ctx, func() (err error) { id, err = o.Lock.Acquire(ctx, st.Target.Checksum); return err })
		if err == nil && o.Metrics != nil {
			o.Metrics.LockWaited(o.Clock.Since(start))
		}
		return SlotHeld{LeaseID: id, Err: err}
	case ActAdopt:
		var ls LeaseState
		err := e.busy(ctx, func() (err error) { ls, err = o.Lock.Adopt(ctx); return err })
		if err == nil && ls == LeaseGone {
			e.log.Error("reboot-slot entry gone (lease expired while the agent was not running); the slot may have gone to another node",
				"lease_id", fmt.Sprintf("%x", st.LeaseID), "state", st.Phase)
		}
		return Adopted{Lease: ls, Err: err}
	case ActRunHooks:
		return HooksDone{Err: e.busy(ctx, func() error { return o.Hooks.Run(ctx) })}
	case ActPrecheck:
		return e.precheck(ctx, st)
	case ActMoveLeader:
		err := e.busy(ctx, func() error { return o.Cluster.MoveLeaderAway(ctx) })
		if err == nil && o.Metrics != nil {
			o.Metrics.LeaderMoved()
		}
		return LeaderMoved{Err: err}
	case ActNotify:
		// Telling people is best effort: it never holds the reboot.
		if err := e.busy(ctx, func() error { return o.Host.Announce(ctx, st.Locked) }); err != nil {
			e.log.Warn("telling the people on the host about the reboot", "err", err)
		}
		return NoticeDone{}
	case ActFence:
		return FenceDone{Err: e.busy(ctx, func() error { return o.Lock.Fence(ctx) })}
	case ActFinalize:
		err := e.busy(ctx, func() error { return o.OS.Finalize(ctx, st.Locked) })
		if err == nil {
			e.finalized = o.Clock.Now() // time.Now's monotonic reading: Since ignores clock steps
		}
		return FinalizeDone{Err: err}
	case ActVerify:
		var ev VerifyDone
		ev.Err = e.busy(ctx, func() (err error) {
			done, err := o.Host.BootComplete(ctx)
			if err != nil || !done {
				ev.BootPending = true
				return err
			}
			ev.Healthy, ev.Reason, err = o.Cluster.LocalHealthy(ctx)
			return err
		})
		return ev
	case ActRelease:
		err := e.busy(ctx, func() error { return o.Lock.Release(ctx) })
		if err == nil {
			// Releasing may drop the announcement with the lease; keep it
			// while the update is still pending here.
			var aerr error
			if act.Withdraw {
				aerr = o.Lock.Withdraw(ctx)
			} else {
				aerr = o.Lock.Announce(ctx, st.Target.Checksum)
			}
			if aerr != nil {
				e.log.Warn("updating the pending-update announcement", "err", aerr)
			}
			if act.Rebooted {
				if rerr := o.Gates.Rebooted(ctx); rerr != nil {
					e.log.Warn("recording the release for the group's reboot spacing", "err", rerr)
				}
			}
		}
		return Released{Err: err}
	}
	panic(fmt.Sprintf("engine: unknown action %q", act.Kind))
}

// precheck looks before the hooks and again before finalizing: the slot is
// still ours, who leads, and whether the cluster can lose this member.
func (e *Engine) precheck(ctx context.Context, st state.State) Event {
	var ev Prechecked
	ev.Err = e.busy(ctx, func() error {
		ls, err := e.o.Lock.Adopt(ctx)
		if err != nil {
			return err
		}
		if ev.SlotLost = ls != LeaseHolding; ev.SlotLost {
			e.log.Error("reboot slot lost before finalizing", "lease_id", fmt.Sprintf("%x", st.LeaseID), "lease", ls.String())
			return nil
		}
		if hold, why := e.o.Gates.Hold(ctx); hold {
			ev.Gated = why
		}
		if d := e.o.Policy.LoggedInDelay; !st.Noticed.IsZero() && e.o.Clock.Now().Before(st.Noticed.Add(d)) {
			if ev.LoggedIn, err = e.o.Host.LoggedIn(ctx); err != nil {
				e.log.Warn("counting the logged-in sessions (waiting for the logged-in delay)", "err", err)
				ev.LoggedIn = -1
			}
		}
		if ev.Leader, err = e.o.Cluster.LocalIsLeader(ctx); err != nil {
			return err
		}
		ev.Safe, ev.Reason, err = e.o.Cluster.SafeToReboot(ctx)
		if errors.Is(err, ErrRefused) {
			ev.Refused, ev.Reason = true, err.Error()
			return nil
		}
		return err
	})
	return ev
}

// noticeTakenBack removes the notice when the record stops saying the people
// on the host were told (notice given, or finalizing) in the same boot: the
// reboot is not coming after all (a release, a failed finalize, a restart
// that drains again). After a reboot /run is empty anyway.
func (e *Engine) noticeTakenBack(prev, next state.State, bootID string) {
	told := func(s state.State) bool { return !s.Noticed.IsZero() || s.Phase == state.Finalizing }
	if !told(prev) || told(next) || prev.BootID != bootID {
		return
	}
	if err := e.o.Host.Unannounce(); err != nil {
		e.log.Warn("taking back the reboot notice", "err", err)
	}
}

// busy runs a blocking action while beating the watchdog: a long staging or
// a long wait for a slot is progress, a wedged loop is not.
func (e *Engine) busy(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	t := time.NewTicker(e.o.BeatInterval)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			e.beat()
		}
	}
}

// wait sleeps until `until`, an update-now request or the end of ctx.
func (e *Engine) wait(ctx context.Context, until time.Time) {
	d := until.Sub(e.o.Clock.Now())
	if d <= 0 {
		return
	}
	timer := e.o.Clock.NewTimer(d)
	defer timer.Stop()
	t := time.NewTicker(e.o.BeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.Chan():
			return
		case <-e.wake:
			return
		case <-t.C:
			e.beat()
		}
	}
}

func (e *Engine) beat() {
	if e.o.Beat != nil {
		e.o.Beat()
	}
}

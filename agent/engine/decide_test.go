package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

var t0 = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

// hours is a window open from 02:00 to 04:00 UTC each day.
type hours struct{ from, to int }

func (h hours) Contains(t time.Time) bool { return t.Hour() >= h.from && t.Hour() < h.to }
func (h hours) Next(t time.Time) time.Time {
	if h.Contains(t) {
		return t
	}
	n := time.Date(t.Year(), t.Month(), t.Day(), h.from, 0, 0, 0, t.Location())
	if !n.After(t) {
		n = n.AddDate(0, 0, 1)
	}
	return n
}

// never is a window with no days: it never opens and Next is zero.
type never struct{}

func (never) Contains(time.Time) bool  { return false }
func (never) Next(time.Time) time.Time { return time.Time{} }

func testPolicy() Policy {
	return Policy{
		CheckInterval:   time.Hour,
		Retry:           Backoff{Base: time.Minute, Max: time.Hour},
		MaxFailures:     3,
		Window:          Always{},
		LeaderAware:     true,
		MoveLeader:      true,
		RequireSafe:     true,
		RecheckInterval: 10 * time.Second,
		RebootTimeout:   10 * time.Minute,
	}
}

var (
	tgt     = state.Target{Checksum: "new", Version: "2"}
	booted  = OSStatus{Booted: Deployment{Checksum: "old"}}
	staged  = OSStatus{Booted: Deployment{Checksum: "old"}, Staged: &Deployment{Checksum: "new"}}
	foreign = OSStatus{Booted: Deployment{Checksum: "old"}, Staged: &Deployment{Checksum: "other"}}
	rebootd = OSStatus{Booted: Deployment{Checksum: "new"}}
	errBoom = errors.New("boom")
)

func rec(p state.Phase, mod ...func(*state.State)) state.State {
	s := state.State{Phase: p, Target: tgt, BootID: "b1"}
	switch p {
	case state.Staged, state.WaitingSlot, state.HoldingSlot, state.Finalizing:
		s.Locked = tgt.Checksum
	}
	switch p {
	case state.HoldingSlot, state.Finalizing, state.Verifying, state.Releasing:
		s.Queued, s.LeaseID = true, 0x42
	}
	for _, m := range mod {
		m(&s)
	}
	return s
}

func TestDecide(t *testing.T) {
	failed := func(n int, setAside bool) func(*state.State) {
		return func(s *state.State) {
			s.Failures = map[string]state.Failure{tgt.Checksum: {Count: n, SetAside: setAside, RetryAt: t0.Add(time.Hour), LastError: "x"}}
		}
	}
	lease := func(s *state.State) { s.Queued = true }
	checkLater := func(s *state.State) { s.NextCheck = t0.Add(24 * time.Hour) }
	shut := func(p *Policy) { p.Window = hours{5, 6} } // opens in 2h
	other := state.Target{Checksum: "newer", Version: "3"}
	unlocked := func(s *state.State) { s.Locked = "" }
	drained := func(s *state.State) { s.HooksRan = true }
	cases := []struct {
		name      string
		st        state.State
		ev        Event
		os        OSStatus
		boot      string
		pol       func(*Policy)
		updateNow bool
		wantPhase state.Phase
		wantAct   ActionKind
		wantWhy   string // substring of the action's reason
		check     func(t *testing.T, s state.State, a Action)
	}{
		// Start and resume.
		{name: "start always recovers first", st: rec(state.Idle), ev: Started{}, os: booted, wantPhase: state.Idle, wantAct: ActRecover},
		{name: "idle and due: check", st: rec(state.Idle), ev: Recovered{}, os: booted, wantPhase: state.Idle, wantAct: ActCheck},
		{name: "idle not due: wait", st: rec(state.Idle, func(s *state.State) { s.NextCheck = t0.Add(time.Minute) }), ev: Recovered{}, os: booted,
			wantPhase: state.Idle, wantAct: ActWait, wantWhy: "next check"},
		{name: "update-now overrides schedule", st: rec(state.Idle, func(s *state.State) { s.NextCheck = t0.Add(time.Minute) }), ev: Ticked{}, os: booted,
			updateNow: true, wantPhase: state.Idle, wantAct: ActCheck},
		{name: "updates disabled: no check", st: rec(state.Idle), ev: Recovered{}, os: booted, pol: func(p *Policy) { p.Disabled = true },
			updateNow: true, wantPhase: state.Idle, wantAct: ActWait, wantWhy: "disabled"},
		{name: "window that never opens: no busy loop", st: rec(state.Staged, checkLater), ev: Ticked{}, os: staged, pol: func(p *Policy) { p.Window = never{} },
			wantPhase: state.Staged, wantAct: ActWait,
			check: func(t *testing.T, s state.State, a Action) {
				if !a.Until.After(t0) {
					t.Errorf("until %v", a.Until)
				}
			}},
		{name: "recover failed: retry later", st: rec(state.Staging), ev: Recovered{Err: errBoom}, os: booted, wantPhase: state.Staging, wantAct: ActWait, wantWhy: "boom"},

		// 1. Check.
		{name: "no update: next check", st: rec(state.Idle), ev: Checked{}, os: booted, wantPhase: state.Idle, wantAct: ActWait,
			check: func(t *testing.T, s state.State, a Action) {
				if !s.NextCheck.Equal(t0.Add(time.Hour)) {
					t.Errorf("next check %v", s.NextCheck)
				}
			}},
		{name: "check error: retry with backoff", st: rec(state.Idle), ev: Checked{Err: errBoom}, os: booted, wantPhase: state.Idle, wantAct: ActWait, wantWhy: "checking for updates: boom"},
		{name: "update: stage", st: rec(state.Idle, func(s *state.State) { s.Target = state.Target{} }), ev: Checked{Target: &tgt}, os: booted,
			wantPhase: state.Staging, wantAct: ActStage},
		{name: "update with a foreign staged deployment: cleanup first", st: rec(state.Idle), ev: Checked{Target: &tgt}, os: foreign,
			wantPhase: state.Staging, wantAct: ActCleanup},
		{name: "update already staged but not by us: cleanup (no re-lock trap)", st: rec(state.Idle), ev: Checked{Target: &tgt}, os: staged,
			wantPhase: state.Staging, wantAct: ActCleanup},
		{name: "target in backoff: wait", st: rec(state.Idle, failed(1, false)), ev: Checked{Target: &tgt}, os: booted,
			wantPhase: state.Idle, wantAct: ActWait, wantWhy: "retrying update new after failure 1"},
		{name: "target set aside: reported", st: rec(state.Idle, failed(3, true)), ev: Checked{Target: &tgt}, os: booted,
			wantPhase: state.Idle, wantAct: ActWait, wantWhy: "set aside after 3 failures"},
		{name: "update-now retries a set-aside target", st: rec(state.Idle, failed(3, true)), ev: Checked{Target: &tgt}, os: booted, updateNow: true,
			wantPhase: state.Staging, wantAct: ActStage,
			check: func(t *testing.T, s state.State, a Action) {
				if _, ok := s.Failures[tgt.Checksum]; ok {
					t.Error("failure record kept")
				}
			}},

		// 2. Stage.
		{name: "cleanup done: stage", st: rec(state.Staging), ev: CleanedUp{}, os: booted, wantPhase: state.Staging, wantAct: ActStage},
		{name: "staged: locked recorded, window open, ask order", st: rec(state.Staging), ev: StageDone{}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Locked != tgt.Checksum || !s.NextCheck.Equal(t0.Add(time.Hour)) {
					t.Errorf("locked %q, next check %v", s.Locked, s.NextCheck)
				}
			}},
		{name: "staged something newer than checked: that is the target", st: rec(state.Staging), ev: StageDone{},
			os: OSStatus{Booted: Deployment{Checksum: "old"}, Staged: &Deployment{Checksum: "newer", Version: "3"}}, wantPhase: state.Staged, wantAct: ActQueryOrder,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Locked != "newer" || s.Target.Checksum != "newer" || s.Target.Version != "3" {
					t.Errorf("%+v", s)
				}
			}},
		{name: "staging ok but nothing staged: failure", st: rec(state.Staging), ev: StageDone{}, os: booted, wantPhase: state.Idle, wantAct: ActWait,
			check: func(t *testing.T, s state.State, a Action) {
				if a.Failed != "stage" {
					t.Errorf("%+v", a)
				}
			}},
		{name: "stage failed: count, back off", st: rec(state.Staging), ev: StageDone{Err: errBoom}, os: booted, wantPhase: state.Idle, wantAct: ActWait,
			check: func(t *testing.T, s state.State, a Action) {
				f := s.Failures[tgt.Checksum]
				if f.Count != 1 || f.SetAside || a.Failed != "stage" || !a.Until.Equal(t0.Add(time.Minute)) {
					t.Errorf("failure %+v, action %+v", f, a)
				}
			}},
		{name: "third stage failure sets the target aside", st: rec(state.Staging, failed(2, false)), ev: StageDone{Err: errBoom}, os: booted, wantPhase: state.Idle, wantAct: ActWait,
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; f.Count != 3 || !f.SetAside {
					t.Errorf("failure %+v", f)
				}
			}},
		{name: "crash while staging, staging finished: staged", st: rec(state.Staging), ev: Recovered{}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder},
		{name: "crash while staging, nothing staged: stage again", st: rec(state.Staging), ev: Recovered{}, os: booted, wantPhase: state.Staging, wantAct: ActStage},

		// 3. Window and slot.
		{name: "window closed: wait for it", st: rec(state.Staged, checkLater), ev: Ticked{}, os: staged, pol: func(p *Policy) { p.Window = hours{5, 6} },
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "reboot window",
			check: func(t *testing.T, s state.State, a Action) {
				if !a.Until.Equal(t0.Add(2 * time.Hour)) {
					t.Errorf("until %v", a.Until)
				}
			}},
		{name: "staged, window closed, check due: look for a newer update", st: rec(state.Staged), ev: Ticked{}, os: staged, pol: shut,
			wantPhase: state.Staged, wantAct: ActCheck, wantWhy: "newer update"},
		{name: "staged, window closed, update-now: check", st: rec(state.Staged, checkLater), ev: Ticked{}, os: staged, pol: shut, updateNow: true,
			wantPhase: state.Staged, wantAct: ActCheck},
		{name: "staged, next check before the window: wake for it", st: rec(state.Staged, func(s *state.State) { s.NextCheck = t0.Add(time.Hour) }),
			ev: Ticked{}, os: staged, pol: shut, wantPhase: state.Staged, wantAct: ActWait, wantWhy: "next check",
			check: func(t *testing.T, s state.State, a Action) {
				if !a.Until.Equal(t0.Add(time.Hour)) {
					t.Errorf("until %v", a.Until)
				}
			}},
		{name: "staged, window open: no check, queue", st: rec(state.Staged), ev: Ticked{}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder},
		{name: "checked while staged, same update: keep it, check later", st: rec(state.Staged), ev: Checked{Target: &tgt}, os: staged, pol: shut,
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "reboot window",
			check: func(t *testing.T, s state.State, a Action) {
				if !s.NextCheck.Equal(t0.Add(time.Hour)) || s.Locked != tgt.Checksum || !a.Until.Equal(t0.Add(time.Hour)) {
					t.Errorf("next check %v, locked %q, until %v", s.NextCheck, s.Locked, a.Until)
				}
			}},
		{name: "checked while staged, nothing offered: keep it", st: rec(state.Staged), ev: Checked{}, os: staged, pol: shut,
			wantPhase: state.Staged, wantAct: ActWait},
		{name: "checked while staged, another update: discard and stage it", st: rec(state.Staged), ev: Checked{Target: &other}, os: staged, pol: shut,
			wantPhase: state.Staging, wantAct: ActCleanup, wantWhy: "update newer is now offered and replaces staged new",
			check: func(t *testing.T, s state.State, a Action) {
				if s.Target != other || s.Locked != "" {
					t.Errorf("target %+v, locked %q", s.Target, s.Locked)
				}
			}},
		{name: "checked while staged, the other update set aside: keep the staged one", st: rec(state.Staged, func(s *state.State) {
			s.Failures = map[string]state.Failure{"newer": {Count: 3, SetAside: true}}
		}), ev: Checked{Target: &other}, os: staged, pol: shut, wantPhase: state.Staged, wantAct: ActWait,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Target != tgt || s.Locked != tgt.Checksum {
					t.Errorf("target %+v, locked %q", s.Target, s.Locked)
				}
			}},
		{name: "checked while staged fails: keep it, retry the check", st: rec(state.Staged), ev: Checked{Err: errBoom}, os: staged, pol: shut,
			wantPhase: state.Staged, wantAct: ActWait,
			check: func(t *testing.T, s state.State, a Action) {
				if s.LastError != "checking for a newer update: boom" || !a.Until.Equal(t0.Add(time.Minute)) {
					t.Errorf("last error %q, until %v", s.LastError, a.Until)
				}
			}},
		{name: "checked while staged, staged vanished meanwhile: stage again", st: rec(state.Staged), ev: Checked{Target: &other}, os: booted, pol: shut,
			wantPhase: state.Idle, wantAct: ActCheck},
		{name: "staged deployment vanished: stage again", st: rec(state.Staged), ev: Ticked{}, os: booted, wantPhase: state.Idle, wantAct: ActCheck},
		{name: "staged target in backoff after a failed hook", st: rec(state.Staged, failed(1, false)), ev: Ticked{}, os: staged, wantPhase: state.Staged, wantAct: ActWait, wantWhy: "retrying after failure"},
		{name: "leader rule says wait: wait, say why", st: rec(state.Staged), ev: OrderQueried{Reason: "local member a is the leader; it updates after b"}, os: staged,
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "it updates after b"},
		{name: "leader rule says go: queue", st: rec(state.Staged), ev: OrderQueried{MayQueue: true}, os: staged, wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		{name: "leader rule unknown: retry", st: rec(state.Staged), ev: OrderQueried{Err: errors.New("etcd down")}, os: staged, wantPhase: state.Staged, wantAct: ActWait, wantWhy: "etcd down"},
		{name: "not leader-aware: queue at once", st: rec(state.Staged), ev: Ticked{}, os: staged, pol: func(p *Policy) { p.LeaderAware = false },
			wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		{name: "slot held: lease recorded, quorum and health before the hooks", st: rec(state.WaitingSlot, lease), ev: SlotHeld{LeaseID: 0x99}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck, wantWhy: "before the pre-reboot hooks",
			check: func(t *testing.T, s state.State, a Action) {
				if s.LeaseID != 0x99 || !s.Queued || s.HooksRan {
					t.Errorf("lease %x queued %v hooks ran %v", s.LeaseID, s.Queued, s.HooksRan)
				}
			}},
		{name: "before the hooks, safe: hooks", st: rec(state.HoldingSlot), ev: Prechecked{Safe: true}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActRunHooks},
		{name: "before the hooks, leader and safe: hooks first, the move comes after", st: rec(state.HoldingSlot), ev: Prechecked{Leader: true, Safe: true}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActRunHooks},
		{name: "before the hooks, not safe: wait undrained", st: rec(state.HoldingSlot), ev: Prechecked{Reason: "member m2 unreachable"}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "not draining yet",
			check: func(t *testing.T, s state.State, a Action) {
				if s.HooksRan {
					t.Error("hooks marked as run")
				}
			}},
		{name: "before the hooks, not safe, quorum check off: hooks", st: rec(state.HoldingSlot), ev: Prechecked{Reason: "member m2 unreachable"}, os: staged,
			pol: func(p *Policy) { p.RequireSafe = false }, wantPhase: state.HoldingSlot, wantAct: ActRunHooks},
		{name: "refused (2-member cluster): never drain, give the slot back, count it", st: rec(state.HoldingSlot), ev: Prechecked{Refused: true, Reason: "2 voting member(s)"}, os: staged,
			wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; f.Count != 1 || !strings.Contains(f.LastError, "2 voting member(s)") || a.Failed != "precheck" || !a.Withdraw {
					t.Errorf("failure %+v, action %+v", f, a)
				}
			}},
		{name: "refused after the hooks too (membership changed)", st: rec(state.HoldingSlot, drained), ev: Prechecked{Refused: true, Reason: "1 voting member(s)"}, os: staged,
			wantPhase: state.Releasing, wantAct: ActRelease},
		{name: "refused but the quorum check is off: go on", st: rec(state.HoldingSlot, drained), ev: Prechecked{Safe: true, Refused: true, Reason: "x"}, os: staged,
			pol: func(p *Policy) { p.RequireSafe = false }, wantPhase: state.HoldingSlot, wantAct: ActFence},
		{name: "acquire failed: retry, still queued", st: rec(state.WaitingSlot, lease), ev: SlotHeld{Err: errBoom}, os: staged, wantPhase: state.WaitingSlot, wantAct: ActWait,
			check: func(t *testing.T, s state.State, a Action) {
				if !s.Queued {
					t.Error("forgot the queue entry")
				}
			}},
		{name: "retry of acquire", st: rec(state.WaitingSlot, lease), ev: Ticked{}, os: staged, wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		{name: "restart while waiting: adopt", st: rec(state.WaitingSlot, lease), ev: Recovered{}, os: staged, wantPhase: state.WaitingSlot, wantAct: ActAdopt},
		{name: "adopted, still in line", st: rec(state.WaitingSlot, lease), ev: Adopted{Lease: LeaseWaiting}, os: staged, wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		{name: "adopted while waiting, now holding", st: rec(state.WaitingSlot, lease), ev: Adopted{Lease: LeaseHolding}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "adopted lease expired: queue again", st: rec(state.HoldingSlot), ev: Adopted{Lease: LeaseGone}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Queued || s.LeaseID != 0 || !strings.Contains(s.LastError, "expired") {
					t.Errorf("queued %v lease %x, error %q", s.Queued, s.LeaseID, s.LastError)
				}
			}},
		{name: "restart holding: quorum and health, then the hooks again", st: rec(state.HoldingSlot, drained), ev: Adopted{Lease: LeaseHolding}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck,
			check: func(t *testing.T, s state.State, a Action) {
				if s.HooksRan {
					t.Error("hooks still marked as run")
				}
			}},
		{name: "restart holding, staged gone: release", st: rec(state.HoldingSlot), ev: Adopted{Lease: LeaseHolding}, os: booted, wantPhase: state.Releasing, wantAct: ActRelease},

		// 4. Hooks.
		{name: "hooks done: last checks", st: rec(state.HoldingSlot), ev: HooksDone{}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActPrecheck,
			check: func(t *testing.T, s state.State, a Action) {
				if !s.HooksRan {
					t.Error("hooks not marked as run")
				}
			}},
		{name: "leaving the slot forgets the hooks", st: rec(state.HoldingSlot, drained), ev: Prechecked{Safe: true, SlotLost: true}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder,
			check: func(t *testing.T, s state.State, a Action) {
				if s.HooksRan {
					t.Error("hooks still marked as run")
				}
			}},
		{name: "hook failed: release, keep staged locked", st: rec(state.HoldingSlot), ev: HooksDone{Err: errBoom}, os: staged, wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Locked != tgt.Checksum || !a.Withdraw || a.Failed != "hooks" {
					t.Errorf("locked %q, action %+v; want the announcement withdrawn during the backoff", s.Locked, a)
				}
			}},
		{name: "third hook failure: set aside, withdraw, unlock the record", st: rec(state.HoldingSlot, failed(2, false)), ev: HooksDone{Err: errBoom}, os: staged,
			wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; f.Count != 3 || !f.SetAside || s.Locked != "" || !a.Withdraw {
					t.Errorf("failure %+v, locked %q, action %+v", f, s.Locked, a)
				}
			}},
		{name: "released after set aside: discard the staged deployment", st: rec(state.Releasing, failed(3, true)), ev: Released{}, os: staged,
			wantPhase: state.Idle, wantAct: ActCleanup, wantWhy: "set aside after 3 failures"},
		{name: "staged target set aside: discard it, never retry it", st: rec(state.Staged, failed(3, true)), ev: Ticked{}, os: staged,
			wantPhase: state.Idle, wantAct: ActCleanup, wantWhy: "set aside after 3 failures",
			check: func(t *testing.T, s state.State, a Action) {
				if s.Locked != "" {
					t.Errorf("locked %q", s.Locked)
				}
			}},
		{name: "set aside and discarded: reported, not staged again", st: rec(state.Idle, failed(3, true)), ev: CleanedUp{}, os: booted,
			wantPhase: state.Idle, wantAct: ActCheck},
		{name: "released after failed hook: staged again, in backoff", st: rec(state.Releasing, func(s *state.State) { s.Locked = tgt.Checksum }, failed(1, false)),
			ev: Released{}, os: staged, wantPhase: state.Staged, wantAct: ActWait},

		// 5. Last checks and finalize.
		{name: "all clear: fence the slot", st: rec(state.HoldingSlot, drained), ev: Prechecked{Safe: true}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActFence},
		{name: "slot proven held: finalize", st: rec(state.HoldingSlot, drained), ev: FenceDone{}, os: staged, wantPhase: state.Finalizing, wantAct: ActFinalize},
		{name: "fence found the slot lost: no finalize, queue again", st: rec(state.HoldingSlot), ev: FenceDone{Err: fmt.Errorf("x: %w", ErrSlotLost)}, os: staged,
			wantPhase: state.Staged, wantAct: ActQueryOrder,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Queued || !strings.Contains(s.LastError, "lost") {
					t.Errorf("queued %v, error %q", s.Queued, s.LastError)
				}
			}},
		{name: "a fence without the hooks run (stale): checks first", st: rec(state.HoldingSlot), ev: FenceDone{}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "fence could not tell (etcd unreachable): no finalize, retry", st: rec(state.HoldingSlot), ev: FenceDone{Err: errBoom}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "boom"},
		{name: "after a failed fence: the last checks again", st: rec(state.HoldingSlot), ev: Ticked{}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "window closed meanwhile: release, stay staged", st: rec(state.HoldingSlot), ev: Prechecked{Safe: true}, os: staged,
			pol: func(p *Policy) { p.Window = hours{5, 6} }, wantPhase: state.Releasing, wantAct: ActRelease},
		{name: "leader: move leadership first", st: rec(state.HoldingSlot, drained), ev: Prechecked{Leader: true, Safe: true}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActMoveLeader},
		{name: "leader, moving disabled: fence, then finalize", st: rec(state.HoldingSlot, drained), ev: Prechecked{Leader: true, Safe: true}, os: staged,
			pol: func(p *Policy) { p.MoveLeader = false }, wantPhase: state.HoldingSlot, wantAct: ActFence},
		{name: "quorum unsafe after the hooks: hold and wait", st: rec(state.HoldingSlot, drained), ev: Prechecked{Reason: "member m2 unhealthy"}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "m2 unhealthy"},
		{name: "slot lost before finalize: no finalize", st: rec(state.HoldingSlot), ev: Prechecked{Safe: true, SlotLost: true}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder},
		{name: "moved: check again", st: rec(state.HoldingSlot), ev: LeaderMoved{}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "finalize issued: wait for the reboot", st: rec(state.Finalizing), ev: FinalizeDone{}, os: staged, wantPhase: state.Finalizing, wantAct: ActWait, wantWhy: "rebooting"},
		{name: "no reboot came: discard, release, count", st: rec(state.Finalizing), ev: Ticked{}, os: staged, wantPhase: state.Releasing, wantAct: ActCleanup,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Failures[tgt.Checksum].Count != 1 || s.Locked != "" {
					t.Errorf("%+v", s)
				}
			}},
		{name: "already unlocked: cleanup and stage again, never loop", st: rec(state.Finalizing), ev: FinalizeDone{Err: errors.New("x: staged deployment already unlocked")}, os: staged,
			wantPhase: state.Releasing, wantAct: ActCleanup},
		{name: "checksum mismatch: cleanup", st: rec(state.Finalizing), ev: FinalizeDone{Err: errors.New("staged deployment checksum mismatch")}, os: staged, wantPhase: state.Releasing, wantAct: ActCleanup},
		{name: "no staged deployment: release and stage again", st: rec(state.Finalizing), ev: FinalizeDone{Err: ErrNoStagedDeployment}, os: booted,
			wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if !a.Withdraw {
					t.Error("announcement kept")
				}
			}},
		{name: "inhibited: keep it locked, release, retry later", st: rec(state.Finalizing), ev: FinalizeDone{Err: ErrInhibited}, os: staged, wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Locked != tgt.Checksum || !a.Withdraw {
					t.Errorf("locked %q, action %+v", s.Locked, a)
				}
			}},
		{name: "inhibited a third time: set aside", st: rec(state.Finalizing, failed(2, false)), ev: FinalizeDone{Err: ErrInhibited}, os: staged,
			wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; !f.SetAside || s.Locked != "" || !a.Withdraw {
					t.Errorf("failure %+v, locked %q, action %+v", f, s.Locked, a)
				}
			}},
		{name: "wrong boot a third time: set aside, withdraw", st: rec(state.Verifying, failed(2, false)), ev: Adopted{Lease: LeaseHolding}, os: booted,
			wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; !f.SetAside || !a.Withdraw {
					t.Errorf("failure %+v, action %+v", f, a)
				}
			}},
		{name: "cleanup after aborted finalize: release", st: rec(state.Releasing), ev: CleanedUp{}, os: booted, wantPhase: state.Releasing, wantAct: ActRelease},
		{name: "restart in finalizing, same boot: never finalize blind", st: rec(state.Finalizing), ev: Recovered{}, os: staged, wantPhase: state.Releasing, wantAct: ActCleanup},

		// 6. After boot.
		{name: "rebooted after finalize: verify", st: rec(state.Finalizing), ev: Started{}, boot: "b2", os: rebootd, wantPhase: state.Verifying, wantAct: ActRecover},
		{name: "verifying: adopt the lease first", st: rec(state.Verifying), ev: Recovered{}, os: rebootd, wantPhase: state.Verifying, wantAct: ActAdopt},
		{name: "adopted after boot: verify", st: rec(state.Verifying), ev: Adopted{Lease: LeaseHolding}, os: rebootd, wantPhase: state.Verifying, wantAct: ActVerify},
		{name: "lease expired during reboot: verify anyway", st: rec(state.Verifying), ev: Adopted{Lease: LeaseGone}, os: rebootd, wantPhase: state.Verifying, wantAct: ActVerify},
		{name: "booted the wrong deployment: failure, release", st: rec(state.Verifying), ev: Adopted{Lease: LeaseHolding}, os: booted, wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if a.Failed != "verify" {
					t.Errorf("%+v", a)
				}
			}},
		{name: "member unhealthy: hold the slot", st: rec(state.Verifying), ev: VerifyDone{Reason: "raft index lag 5000"}, os: rebootd, wantPhase: state.Verifying, wantAct: ActWait, wantWhy: "lag"},
		{name: "healthy: release and withdraw", st: rec(state.Verifying, failed(1, false)), ev: VerifyDone{Healthy: true}, os: rebootd, wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if !a.Withdraw || len(s.Failures) != 0 {
					t.Errorf("action %+v failures %v", a, s.Failures)
				}
			}},
		{name: "released: idle until next check", st: rec(state.Releasing, func(s *state.State) { s.NextCheck = t0.Add(time.Hour) }), ev: Released{}, os: rebootd, wantPhase: state.Idle, wantAct: ActWait},
		{name: "released with an unlocked staged left: cleanup", st: rec(state.Releasing), ev: Released{}, os: foreign, wantPhase: state.Idle, wantAct: ActCleanup},
		{name: "release failed: retry", st: rec(state.Releasing), ev: Released{Err: errBoom}, os: rebootd, wantPhase: state.Releasing, wantAct: ActWait},

		// Unplanned reboots.
		{name: "unplanned reboot while staged: stage again", st: rec(state.Staged), ev: Started{}, boot: "b2", os: booted, wantPhase: state.Idle, wantAct: ActRecover,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Locked != "" || s.NextCheck.After(t0) {
					t.Errorf("%+v", s)
				}
			}},
		{name: "unplanned reboot while holding: give the slot back", st: rec(state.HoldingSlot), ev: Started{}, boot: "b2", os: booted, wantPhase: state.Releasing, wantAct: ActRecover},
		{name: "unplanned reboot while staging", st: rec(state.Staging, unlocked), ev: Started{}, boot: "b2", os: booted, wantPhase: state.Idle, wantAct: ActRecover},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol := testPolicy()
			if c.pol != nil {
				c.pol(&pol)
			}
			boot := c.boot
			if boot == "" {
				boot = "b1"
			}
			before := c.st.Clone()
			obs := Obs{BootID: boot, OS: c.os, Recovered: true, UpdateNow: c.updateNow, Rand: 0.5}
			st, act := Decide(c.st, c.ev, obs, pol, t0)
			if st.Phase != c.wantPhase || act.Kind != c.wantAct {
				t.Fatalf("got %s / %s, want %s / %s", st.Phase, act, c.wantPhase, c.wantAct)
			}
			if c.wantWhy != "" && !strings.Contains(act.Reason, c.wantWhy) {
				t.Errorf("reason %q does not say %q", act.Reason, c.wantWhy)
			}
			if st.BootID != boot {
				t.Errorf("record not stamped with the current boot: %q", st.BootID)
			}
			if !c.st.Equal(before) {
				t.Error("Decide changed its input")
			}
			if c.check != nil {
				c.check(t, st, act)
			}
		})
	}
}

// Never a finalize without a held, locked, staged target: every event, from
// every phase, in every world.
// TestDecideNeverFinalizesBlind: of every phase x OS state x event, only a
// held slot with our locked deployment staged, proven held by a fence that
// passed, finalizes, and that safe path does finalize (a core that never
// finalized would pass the first half).
func TestDecideNeverFinalizesBlind(t *testing.T) {
	safe := FenceDone{}
	events := []Event{Started{}, Ticked{}, Recovered{}, Checked{Target: &tgt}, StageDone{}, CleanedUp{},
		OrderQueried{}, SlotHeld{LeaseID: 1}, Adopted{Lease: LeaseHolding}, Adopted{Lease: LeaseGone},
		HooksDone{}, Prechecked{Safe: true}, Prechecked{Safe: true, SlotLost: true}, LeaderMoved{}, safe, FenceDone{Err: ErrSlotLost},
		FenceDone{Err: errBoom}, FinalizeDone{}, VerifyDone{Healthy: true}, Released{}}
	finalizes := 0
	for _, p := range state.Phases {
		for _, os := range []OSStatus{booted, staged, foreign, rebootd} {
			for _, ev := range events {
				for _, ran := range []bool{false, true} {
					st := rec(p)
					st.HooksRan = ran
					next, act := Decide(st, ev, Obs{BootID: "b1", OS: os, Recovered: true}, testPolicy(), t0)
					if p == state.HoldingSlot && ran && os.Staged == staged.Staged && ev == Event(safe) {
						if act.Kind != ActFinalize || next.Phase != state.Finalizing {
							t.Errorf("safe path: %s + %T (%+v) with our deployment staged: %s (%s), phase %s; want finalize",
								p, ev, ev, act.Kind, act.Reason, next.Phase)
						}
					}
					if act.Kind != ActFinalize {
						continue
					}
					finalizes++
					if fd, ok := ev.(FenceDone); !ok || fd.Err != nil {
						t.Errorf("%s + %T (%+v): finalize without a fence that passed", p, ev, os)
					}
					if st.Phase != state.HoldingSlot || !st.HooksRan || !next.Queued || next.Locked != tgt.Checksum || os.Staged == nil || os.Staged.Checksum != tgt.Checksum {
						t.Errorf("%s + %T (%+v): finalize from %+v", p, ev, os, st)
					}
				}
			}
		}
	}
	if finalizes == 0 {
		t.Error("no combination finalizes")
	}
}

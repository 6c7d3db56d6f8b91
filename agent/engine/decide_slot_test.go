package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// The reboot window, the leader rule, the slot, the hooks.
func TestDecideWindowSlotHooks(t *testing.T) {
	runDecide(t, []decideCase{
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
		{name: "leader rule says wait: wait, say why", st: rec(state.Staged), ev: OrderQueried{QueueOrder: QueueOrder{Reason: "local member a is the leader; it updates after b"}}, os: staged,
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "it updates after b"},
		{name: "leader rule says go: queue", st: rec(state.Staged), ev: OrderQueried{QueueOrder: QueueOrder{MayQueue: true}}, os: staged, wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		// leader.followers_grace: a leader nobody else is pending for gives
		// the members that announced nothing until the grace after it
		// staged, looking again every RecheckInterval (10 s here).
		{name: "leader, others silent, grace running: look again after the recheck interval", st: rec(state.Staged, stagedAgo(5*time.Second)),
			ev: OrderQueried{QueueOrder: QueueOrder{MayQueue: true, Unannounced: []string{"b", "c"}}}, os: staged, pol: grace(2 * time.Minute),
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "giving b, c until 2026-12-02T03:01:55Z to announce",
			check: func(t *testing.T, s state.State, a Action) {
				if !a.Until.Equal(t0.Add(10*time.Second)) || !s.Since.Equal(t0.Add(-5*time.Second)) || s.Queued {
					t.Errorf("until %v, since %v, queued %v", a.Until, s.Since, s.Queued)
				}
			}},
		{name: "leader, others silent, grace ends before the recheck: wake at its end", st: rec(state.Staged, stagedAgo(115*time.Second)),
			ev: OrderQueried{QueueOrder: QueueOrder{MayQueue: true, Unannounced: []string{"b"}}}, os: staged, pol: grace(2 * time.Minute),
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "leader.followers_grace",
			check: func(t *testing.T, s state.State, a Action) {
				if !a.Until.Equal(t0.Add(5 * time.Second)) {
					t.Errorf("until %v", a.Until)
				}
			}},
		{name: "leader, others silent, grace over: queue (bounded)", st: rec(state.Staged, stagedAgo(2*time.Minute)),
			ev: OrderQueried{QueueOrder: QueueOrder{MayQueue: true, Unannounced: []string{"b"}}}, os: staged, pol: grace(2 * time.Minute),
			wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		{name: "leader, nobody silent: queue at once", st: rec(state.Staged, stagedAgo(time.Second)),
			ev: OrderQueried{QueueOrder: QueueOrder{MayQueue: true}}, os: staged, pol: grace(2 * time.Minute), wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		{name: "grace off: the leader queues at once", st: rec(state.Staged, stagedAgo(time.Second)),
			ev: OrderQueried{QueueOrder: QueueOrder{MayQueue: true, Unannounced: []string{"b"}}}, os: staged, wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		// Members seen pending since staging found the update: once they
		// have updated and withdrawn, the leader does not wait for them.
		{name: "leader waits for pending followers: they are recorded as announced", st: rec(state.Staged, stagedAgo(time.Second)),
			ev: OrderQueried{QueueOrder: QueueOrder{Reason: "it updates after b", Pending: []string{"c", "a", "", "b"}}}, os: staged, pol: grace(2 * time.Minute),
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "it updates after b",
			check: func(t *testing.T, s state.State, a Action) {
				if strings.Join(s.Announced, " ") != "a b c" {
					t.Errorf("announced %q", s.Announced)
				}
			}},
		{name: "followers seen before have updated: the leader queues within the grace", st: rec(state.Staged, stagedAgo(time.Second), heardOf("b", "c")),
			ev: OrderQueried{QueueOrder: QueueOrder{MayQueue: true, Unannounced: []string{"b", "c"}, Pending: []string{"a"}}}, os: staged, pol: grace(2 * time.Minute),
			wantPhase: state.WaitingSlot, wantAct: ActAcquire},
		{name: "one follower seen, one never: wait for the silent one only", st: rec(state.Staged, stagedAgo(time.Second), heardOf("b")),
			ev: OrderQueried{QueueOrder: QueueOrder{MayQueue: true, Unannounced: []string{"b", "c"}}}, os: staged, pol: grace(2 * time.Minute),
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "giving c until"},
		{name: "a new update: members heard for the last one are forgotten", st: rec(state.Idle, heardOf("b")),
			ev: Checked{Target: &other}, wantPhase: state.Staging, wantAct: ActStage,
			check: func(t *testing.T, s state.State, a Action) {
				if s.Announced != nil {
					t.Errorf("announced %q", s.Announced)
				}
			}},
		{name: "grace running, but the leader rule says wait: its reason", st: rec(state.Staged, stagedAgo(time.Second)),
			ev: OrderQueried{QueueOrder: QueueOrder{Reason: "local member a is the leader; it updates after b", Unannounced: []string{"c"}}}, os: staged, pol: grace(2 * time.Minute),
			wantPhase: state.Staged, wantAct: ActWait, wantWhy: "it updates after b"},
		{name: "leader rule unknown: retry", st: rec(state.Staged), ev: OrderQueried{Err: errors.New("etcd down")}, os: staged, wantPhase: state.Staged, wantAct: ActWait, wantWhy: "etcd down"},
		{name: "in the window: ask the leader rule before queueing", st: rec(state.Staged), ev: Ticked{}, os: staged,
			wantPhase: state.Staged, wantAct: ActQueryOrder},
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
		{name: "refused but the quorum check is off: go on", st: rec(state.HoldingSlot, told), ev: Prechecked{Safe: true, Refused: true, Reason: "x"}, os: staged,
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
		{name: "third hook failure: set aside, unlock the record, discard before the release", st: rec(state.HoldingSlot, failed(2, false)), ev: HooksDone{Err: errBoom}, os: staged,
			wantPhase: state.Releasing, wantAct: ActCleanup,
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; f.Count != 3 || !f.SetAside || s.Locked != "" || a.Failed != "hooks" {
					t.Errorf("failure %+v, locked %q, action %+v", f, s.Locked, a)
				}
				next, act := Decide(s, CleanedUp{}, Obs{BootID: s.BootID, OS: booted, Recovered: true}, testPolicy(), t0)
				if next.Phase != state.Releasing || act.Kind != ActRelease || !act.Withdraw {
					t.Errorf("after the cleanup: %s, %+v", next.Phase, act)
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
	})
}

// stagedAgo: the record entered its phase d before t0.
func stagedAgo(d time.Duration) func(*state.State) {
	return func(s *state.State) { s.Since = t0.Add(-d) }
}

func grace(d time.Duration) func(*Policy) { return func(p *Policy) { p.FollowersGrace = d } }

// heardOf: the members already seen with an update pending.
func heardOf(members ...string) func(*state.State) {
	return func(s *state.State) { s.Announced = members }
}

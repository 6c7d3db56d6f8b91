package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// The last checks and finalize, after the boot, unplanned reboots.
func TestDecideFinalizeAfterBoot(t *testing.T) {
	runDecide(t, []decideCase{
		// 5. Last checks and finalize.
		{name: "all clear: fence the slot", st: rec(state.HoldingSlot, told), ev: Prechecked{Safe: true}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActFence},
		{name: "slot proven held: finalize", st: rec(state.HoldingSlot, told), ev: FenceDone{}, os: staged, wantPhase: state.Finalizing, wantAct: ActFinalize},
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
		{name: "leader: move leadership first", st: rec(state.HoldingSlot, told), ev: Prechecked{Leader: true, Safe: true}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActMoveLeader},
		{name: "leader, moving disabled: fence, then finalize", st: rec(state.HoldingSlot, told), ev: Prechecked{Leader: true, Safe: true}, os: staged,
			pol: func(p *Policy) { p.MoveLeader = false }, wantPhase: state.HoldingSlot, wantAct: ActFence},
		{name: "quorum unsafe after the hooks: hold and wait", st: rec(state.HoldingSlot, drained), ev: Prechecked{Reason: "member m2 unhealthy"}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "m2 unhealthy"},
		{name: "slot lost before finalize: no finalize", st: rec(state.HoldingSlot), ev: Prechecked{Safe: true, SlotLost: true}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder},
		{name: "moved: check again", st: rec(state.HoldingSlot), ev: LeaderMoved{}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "finalize issued: wait for the reboot", st: rec(state.Finalizing), ev: FinalizeDone{}, os: staged, wantPhase: state.Finalizing, wantAct: ActWait, wantWhy: "rebooting"},
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
		{name: "busy rpm-ostree refused the finalize: no failure, keep slot and lock, last checks again", st: rec(state.Finalizing, failed(2, false)),
			ev: FinalizeDone{Err: fmt.Errorf("finalizing: %w", ErrBusy)}, os: staged, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "busy: ",
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; f.Count != 2 || s.Locked != tgt.Checksum || !s.Queued || a.Failed != "" {
					t.Errorf("failure %+v, locked %q, queued %v, action %+v", f, s.Locked, s.Queued, a)
				}
				next, act := Decide(s, Ticked{}, Obs{BootID: s.BootID, OS: staged, Recovered: true}, testPolicy(), a.Until)
				if next.Phase != state.HoldingSlot || act.Kind != ActPrecheck {
					t.Errorf("after the wait: %s, %s", next.Phase, act.Kind)
				}
			}},
		{name: "inhibited a third time: set aside, discarded before the release", st: rec(state.Finalizing, failed(2, false)), ev: FinalizeDone{Err: ErrInhibited}, os: staged,
			wantPhase: state.Releasing, wantAct: ActCleanup,
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; !f.SetAside || s.Locked != "" {
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
	})
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
		HooksDone{}, Prechecked{Safe: true}, Prechecked{Safe: true, SlotLost: true}, NoticeDone{}, LeaderMoved{}, safe, FenceDone{Err: ErrSlotLost},
		FenceDone{Err: errBoom}, FinalizeDone{}, VerifyDone{Healthy: true}, Released{}}
	finalizes := 0
	for _, p := range state.Phases {
		for _, os := range []OSStatus{booted, staged, foreign, rebootd} {
			for _, ev := range events {
				for _, ran := range []int{0, 1, 2} { // hooks not run, run, run and people told
					st := rec(p)
					st.HooksRan = ran > 0
					if ran == 2 {
						st.Noticed = t0.Add(-time.Minute)
					}
					next, act := Decide(st, ev, Obs{BootID: "b1", OS: os, Recovered: true}, testPolicy(), t0)
					if p == state.HoldingSlot && ran == 2 && os.Staged == staged.Staged && ev == Event(safe) {
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
					if st.Phase != state.HoldingSlot || !st.HooksRan || st.Noticed.IsZero() || !next.Queued || next.Locked != tgt.Checksum || os.Staged == nil || os.Staged.Checksum != tgt.Checksum {
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

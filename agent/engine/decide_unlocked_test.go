package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// stagedUnlocked is the agent's update still staged, but its finalization
// lock removed by someone else (bootc's update timer, `bootc upgrade`,
// `rpm-ostree finalize-deployment`): any reboot would apply it.
var stagedUnlockedOS = OSStatus{Booted: Deployment{Checksum: "old"}, Staged: &Deployment{Checksum: "new", Unlocked: true}}

// TestDecideStagedUnlockedBehindTheAgent: a staged deployment whose lock is
// gone is never treated as the agent's: in every phase before finalize it is
// discarded (and the slot, if held, given back only after that), never
// finalized or left for a reboot.
func TestDecideStagedUnlockedBehindTheAgent(t *testing.T) {
	notLocked := func(t *testing.T, s state.State, a Action) {
		t.Helper()
		if s.Locked != "" {
			t.Errorf("record still says %q is locked", s.Locked)
		}
	}
	runDecide(t, []decideCase{
		{name: "staged, waiting for the window: discard and stage again", st: rec(state.Staged), ev: Ticked{}, os: stagedUnlockedOS,
			pol: shut, wantPhase: state.Staging, wantAct: ActCleanup, wantWhy: "unlocked outside the agent", check: notLocked},
		{name: "staged, window open: discard, never queue", st: rec(state.Staged), ev: Ticked{}, os: stagedUnlockedOS,
			wantPhase: state.Staging, wantAct: ActCleanup, wantWhy: "without a reboot slot", check: notLocked},
		{name: "discarded: the same target is staged again", st: rec(state.Staging), ev: CleanedUp{}, os: booted,
			wantPhase: state.Staging, wantAct: ActStage},
		{name: "a check while staged", st: rec(state.Staged), ev: Checked{}, os: stagedUnlockedOS,
			wantPhase: state.Staging, wantAct: ActCleanup, check: notLocked},
		{name: "restart: a new process does not adopt it", st: rec(state.Staged), ev: Recovered{}, os: stagedUnlockedOS,
			wantPhase: state.Staging, wantAct: ActCleanup},
		{name: "restart while staging: not taken for a finished staging", st: rec(state.Staging), ev: Recovered{}, os: stagedUnlockedOS,
			wantPhase: state.Staging, wantAct: ActCleanup},
		{name: "staging left it unlocked: a failure, discarded", st: rec(state.Staging), ev: StageDone{}, os: stagedUnlockedOS,
			wantPhase: state.Idle, wantAct: ActCleanup, check: func(t *testing.T, s state.State, a Action) {
				notLocked(t, s, a)
				if a.Failed != "stage" || s.Failures[tgt.Checksum].Count != 1 {
					t.Errorf("failed %q, failures %+v: want one stage failure", a.Failed, s.Failures)
				}
			}},
		{name: "holding the slot, last checks: discard before giving the slot back", st: rec(state.HoldingSlot, told),
			ev: Prechecked{Safe: true}, os: stagedUnlockedOS,
			wantPhase: state.Releasing, wantAct: ActCleanup, wantWhy: "before giving the slot back", check: notLocked},
		{name: "fenced: never finalized", st: rec(state.HoldingSlot, told), ev: FenceDone{}, os: stagedUnlockedOS,
			wantPhase: state.Releasing, wantAct: ActCleanup, check: func(t *testing.T, s state.State, a Action) {
				notLocked(t, s, a)
				if !strings.Contains(s.LastError, "unlocked outside the agent") {
					t.Errorf("LastError %q does not say the lock was removed", s.LastError)
				}
			}},
		{name: "restart holding the slot: discard, then release", st: rec(state.HoldingSlot), ev: Adopted{Lease: LeaseHolding},
			os: stagedUnlockedOS, wantPhase: state.Releasing, wantAct: ActCleanup},
		{name: "released after the window closed: not back to staged", st: rec(state.Releasing, func(s *state.State) { s.Locked = tgt.Checksum }),
			ev: Released{}, os: stagedUnlockedOS, wantPhase: state.Idle, wantAct: ActCleanup},
		{name: "finalizing: unlocked is the agent's own doing", st: rec(state.Finalizing), ev: FinalizeDone{}, os: stagedUnlockedOS,
			wantPhase: state.Finalizing, wantAct: ActWait, wantWhy: "rebooting into"},
		{name: "still locked: waits as before", st: rec(state.Staged, checkLater), ev: Ticked{}, os: staged, pol: shut,
			wantPhase: state.Staged, wantAct: ActWait},
	})
}

// TestDecideWatchesStagedWhileWaiting: waiting for a window hours away,
// the engine looks at the host every WatchStaged, so a removed lock is seen
// before the window, not at it.
func TestDecideWatchesStagedWhileWaiting(t *testing.T) {
	runDecide(t, []decideCase{
		{name: "capped at WatchStaged", st: rec(state.Staged, checkLater), ev: Ticked{}, os: staged,
			pol: func(p *Policy) { shut(p); p.WatchStaged = time.Minute }, wantPhase: state.Staged, wantAct: ActWait,
			wantWhy: "waiting for the reboot window", check: func(t *testing.T, _ state.State, a Action) {
				if !a.Until.Equal(t0.Add(time.Minute)) {
					t.Errorf("waits until %s, want %s", a.Until, t0.Add(time.Minute))
				}
			}},
		{name: "an earlier check comes first", st: rec(state.Staged, func(s *state.State) { s.NextCheck = t0.Add(10 * time.Second) }),
			ev: Ticked{}, os: staged, pol: func(p *Policy) { shut(p); p.WatchStaged = time.Minute }, wantPhase: state.Staged, wantAct: ActWait,
			wantWhy: "next check", check: func(t *testing.T, _ state.State, a Action) {
				if !a.Until.Equal(t0.Add(10 * time.Second)) {
					t.Errorf("waits until %s, want the check at %s", a.Until, t0.Add(10*time.Second))
				}
			}},
	})
}

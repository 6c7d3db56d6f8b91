package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// finalizedAgo: finalize-deployment succeeded in this process d ago on the
// monotonic clock.
func finalizedAgo(d time.Duration) func(*Obs) {
	return func(o *Obs) { o.FinalizedHere, o.RebootWait = true, d }
}

// TestDecideAwaitReboot: after finalize-deployment, a changed boot ID says
// the reboot happened; in the same boot, only the monotonic time waited in
// this process makes it overdue. A wall clock stepped hours either way
// changes nothing, and the slot is never given back while the finalized
// (unlocked) deployment is still staged: any reboot would apply it.
func TestDecideAwaitReboot(t *testing.T) {
	// The record entered Finalizing at t0 (Since); the wall clock below is
	// stepped from there.
	fin := rec(state.Finalizing, told, func(s *state.State) { s.Since = t0 })
	noFailure := func(t *testing.T, s state.State, a Action) {
		t.Helper()
		if len(s.Failures) != 0 || a.Failed != "" || s.Locked != tgt.Checksum || !s.Queued {
			t.Errorf("failures %v, action %+v, locked %q, queued %v", s.Failures, a, s.Locked, s.Queued)
		}
	}
	waitsUntil := func(want time.Time) func(*testing.T, state.State, Action) {
		return func(t *testing.T, s state.State, a Action) {
			noFailure(t, s, a)
			if !a.Until.Equal(want) {
				t.Errorf("waits until %s, want %s", a.Until, want)
			}
		}
	}
	overdue := func(t *testing.T, s state.State, a Action) {
		if f := s.Failures[tgt.Checksum]; f.Count != 1 || a.Failed != "finalize" || s.Locked != "" || !s.Queued {
			t.Errorf("failure %+v, action %+v, locked %q, queued %v", f, a, s.Locked, s.Queued)
		}
		if !strings.Contains(s.LastError, "monotonic") || !strings.Contains(s.LastError, "discarded") {
			t.Errorf("the journal does not say what happened: %q", s.LastError)
		}
	}
	runDecide(t, []decideCase{
		{name: "finalized: wait the whole timeout", st: fin, ev: FinalizeDone{}, os: staged, obs: finalizedAgo(0),
			wantPhase: state.Finalizing, wantAct: ActWait, wantWhy: "rebooting", check: waitsUntil(t0.Add(10 * time.Minute))},
		{name: "a minute in: wait the rest", st: fin, ev: Ticked{}, os: staged, obs: finalizedAgo(time.Minute), at: t0.Add(time.Minute),
			wantPhase: state.Finalizing, wantAct: ActWait, check: waitsUntil(t0.Add(10 * time.Minute))},
		{name: "wall clock stepped 5h forward: nothing changes", st: fin, ev: Ticked{}, os: staged, obs: finalizedAgo(time.Minute), at: t0.Add(5 * time.Hour),
			wantPhase: state.Finalizing, wantAct: ActWait, check: waitsUntil(t0.Add(5*time.Hour + 9*time.Minute))},
		{name: "wall clock stepped 5h back: nothing changes, no wait of hours", st: fin, ev: Ticked{}, os: staged, obs: finalizedAgo(time.Minute), at: t0.Add(-5 * time.Hour),
			wantPhase: state.Finalizing, wantAct: ActWait, check: waitsUntil(t0.Add(-5*time.Hour + 9*time.Minute))},
		{name: "update-now wakes the wait after a forward step: still waiting", st: fin, ev: Ticked{}, os: staged, obs: finalizedAgo(30 * time.Second), at: t0.Add(3 * time.Hour), updateNow: true,
			wantPhase: state.Finalizing, wantAct: ActWait, check: noFailure},
		{name: "overdue on the monotonic clock, wall clock stepped back: discard first, keep the slot", st: fin, ev: Ticked{}, os: staged, obs: finalizedAgo(10 * time.Minute), at: t0.Add(-5 * time.Hour),
			wantPhase: state.Releasing, wantAct: ActCleanup, check: overdue},
		{name: "overdue, wall clock stepped forward: the same", st: fin, ev: Ticked{}, os: staged, obs: finalizedAgo(11 * time.Minute), at: t0.Add(7 * time.Hour),
			wantPhase: state.Releasing, wantAct: ActCleanup, check: overdue},
		{name: "overdue and nothing staged any more: release", st: fin, ev: Ticked{}, os: booted, obs: finalizedAgo(time.Hour),
			wantPhase: state.Releasing, wantAct: ActRelease},
		{name: "discarded, but rpm-ostree still shows it staged: keep the slot, retry", st: rec(state.Releasing, unlocked), ev: CleanedUp{}, os: staged,
			wantPhase: state.Releasing, wantAct: ActWait, wantWhy: "still staged"},
		{name: "the retry after that: discard again, never release", st: rec(state.Releasing, unlocked), ev: Ticked{}, os: staged,
			wantPhase: state.Releasing, wantAct: ActCleanup},
		{name: "discarded and gone: release", st: rec(state.Releasing, unlocked), ev: CleanedUp{}, os: booted,
			wantPhase: state.Releasing, wantAct: ActRelease},
		{name: "stale tick, not finalized in this process, same boot: discard before the release", st: fin, ev: Ticked{}, os: staged,
			wantPhase: state.Releasing, wantAct: ActCleanup, wantWhy: "discarding"},
		{name: "agent restarted in the same boot: discard before the release, whatever the wall clock", st: fin, ev: Recovered{}, os: staged, at: t0.Add(-5 * time.Hour),
			wantPhase: state.Releasing, wantAct: ActCleanup,
			check: func(t *testing.T, s state.State, a Action) {
				if !strings.Contains(s.LastError, "restarted in the boot that finalized") {
					t.Errorf("the journal does not say what happened: %q", s.LastError)
				}
			}},
		{name: "new boot: the reboot happened, whatever the wall clock", st: fin, ev: Started{}, boot: "b2", os: rebootd, at: t0.Add(-5 * time.Hour),
			wantPhase: state.Verifying, wantAct: ActRecover},
		{name: "new boot long after: the reboot happened", st: fin, ev: Started{}, boot: "b2", os: rebootd, at: t0.Add(50 * time.Hour),
			wantPhase: state.Verifying, wantAct: ActRecover},
	})
}

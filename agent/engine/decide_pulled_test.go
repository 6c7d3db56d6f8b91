package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

var pulled = &Pulled{Checksum: tgt.Checksum, Message: "release 2 (new) was pulled: the update graph offers no edge from 1 to it any more"}

// pulledErr is a source's PulledRelease (graph.PulledError).
type pulledErr struct{ sum string }

func (e pulledErr) Error() string          { return "release " + e.sum + " was pulled: gone" }
func (e pulledErr) PulledChecksum() string { return e.sum }

func recheck(p *Policy) { p.RecheckStaged = true }

// A release its source pulled after it was staged is set aside and its
// staged deployment discarded; an empty check from a source that cannot
// say "pulled" keeps the staged update. With RecheckStaged (the graph), the
// staged update is checked again before queueing, whatever the window.
func TestDecidePulled(t *testing.T) {
	setAsideByPull := func(t *testing.T, s state.State, a Action) {
		t.Helper()
		f := s.Failures[tgt.Checksum]
		if !f.SetAside || f.Count != 0 || !strings.Contains(f.LastError, "pulled") || s.Locked != "" || a.Failed != "" {
			t.Errorf("failure %+v, locked %q, action %+v", f, s.Locked, a)
		}
		if !s.NextCheck.Equal(t0.Add(time.Hour)) {
			t.Errorf("next check %v", s.NextCheck)
		}
	}
	runDecide(t, []decideCase{
		{name: "staged release pulled: set aside, discarded", st: rec(state.Staged), ev: Checked{Pulled: pulled}, os: staged,
			wantPhase: state.Idle, wantAct: ActCleanup, wantWhy: "was pulled", check: setAsideByPull},
		{name: "pulled while waiting for the window: the same", st: rec(state.Staged), ev: Checked{Pulled: pulled}, os: staged, pol: shut,
			wantPhase: state.Idle, wantAct: ActCleanup, wantWhy: "discarding its staged deployment", check: setAsideByPull},
		{name: "pulled with a replacement offered: set aside first, the next check stages it", st: rec(state.Staged),
			ev: Checked{Target: &other, Pulled: pulled}, os: staged, wantPhase: state.Idle, wantAct: ActCleanup, check: setAsideByPull},
		{name: "nothing offered by a source that cannot say pulled: the staged update stays", st: rec(state.Staged), ev: Checked{}, os: staged,
			wantPhase: state.Staged, wantAct: ActQueryOrder},
		{name: "another release pulled than the staged one: the staged update stays", st: rec(state.Staged),
			ev: Checked{Pulled: &Pulled{Checksum: "other", Message: "x"}}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder,
			check: func(t *testing.T, s state.State, a Action) {
				if len(s.Failures) != 0 {
					t.Errorf("failures %+v", s.Failures)
				}
			}},
		{name: "idle with the pulled release still staged (a crash before the cleanup): discarded", st: rec(state.Idle),
			ev: Checked{Pulled: pulled}, os: staged, wantPhase: state.Idle, wantAct: ActCleanup, wantWhy: "was pulled", check: setAsideByPull},
		{name: "idle, the pulled release not staged: no update", st: rec(state.Idle), ev: Checked{Pulled: pulled}, os: foreign,
			wantPhase: state.Idle, wantAct: ActWait, wantWhy: "no update available"},
		{name: "a pulled release offered again is reported set aside", st: rec(state.Idle, func(s *state.State) {
			s.Failures = map[string]state.Failure{tgt.Checksum: {SetAside: true, LastError: pulled.Message}}
		}), ev: Checked{Target: &tgt}, os: booted, wantPhase: state.Idle, wantAct: ActWait, wantWhy: "set aside (release 2 (new) was pulled"},

		{name: "staged on another stream (graph.WrongStreamError): set aside, discarded", st: rec(state.Staging),
			ev: StageDone{Err: fmt.Errorf("staging: %w", pulledErr{tgt.Checksum})}, os: staged,
			wantPhase: state.Idle, wantAct: ActCleanup, wantWhy: "discarding its staged deployment", check: setAsideByPull},

		// Checking again before queueing (the graph's RecheckStaged).
		{name: "recheck: staging done, the check is due before queueing even with the window open", st: rec(state.Staging), ev: StageDone{}, os: staged,
			pol: recheck, wantPhase: state.Staged, wantAct: ActCheck, wantWhy: "still offers it before queueing"},
		{name: "recheck: still offered, queue", st: rec(state.Staged), ev: Checked{Target: &tgt}, os: staged, pol: recheck,
			wantPhase: state.Staged, wantAct: ActQueryOrder,
			check: func(t *testing.T, s state.State, a Action) {
				if !s.NextCheck.Equal(t0.Add(time.Hour)) {
					t.Errorf("next check %v", s.NextCheck)
				}
			}},
		{name: "recheck: pulled, discarded before queueing", st: rec(state.Staged), ev: Checked{Pulled: pulled}, os: staged, pol: recheck,
			wantPhase: state.Idle, wantAct: ActCleanup, check: setAsideByPull},
		{name: "recheck: the graph unreachable, queue (it was offered; the next check is after a retry delay)", st: rec(state.Staged),
			ev: Checked{Err: errBoom}, os: staged, pol: recheck, wantPhase: state.Staged, wantAct: ActQueryOrder,
			check: func(t *testing.T, s state.State, a Action) {
				if !strings.Contains(s.LastError, "boom") || !s.NextCheck.After(t0) {
					t.Errorf("last error %q, next check %v", s.LastError, s.NextCheck)
				}
			}},
		{name: "recheck: back to staged after losing the slot, check due: check first", st: rec(state.WaitingSlot, lease),
			ev: Adopted{Lease: LeaseGone}, os: staged, pol: recheck, wantPhase: state.Staged, wantAct: ActCheck},
		{name: "recheck: check not due: queue", st: rec(state.Staged, checkLater), ev: Ticked{}, os: staged, pol: recheck,
			wantPhase: state.Staged, wantAct: ActQueryOrder},

		// And once more with the slot granted, before the hooks.
		{name: "recheck: slot granted, check before the hooks", st: rec(state.WaitingSlot, lease), ev: SlotHeld{LeaseID: 7}, os: staged, pol: recheck,
			wantPhase: state.HoldingSlot, wantAct: ActCheck, wantWhy: "before the pre-reboot hooks"},
		{name: "without recheck: slot granted, prechecks", st: rec(state.WaitingSlot, lease), ev: SlotHeld{LeaseID: 7}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "holding the slot, pulled: discarded before the slot goes back, set aside", st: rec(state.HoldingSlot), ev: Checked{Pulled: pulled}, os: staged,
			pol: recheck, wantPhase: state.Releasing, wantAct: ActCleanup, wantWhy: "was pulled: the update graph",
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; !f.SetAside || s.Locked != "" || s.HooksRan {
					t.Errorf("failure %+v, record %+v", f, s)
				}
			}},
		{name: "holding the slot, pulled, nothing staged any more: the slot goes back, withdrawn", st: rec(state.HoldingSlot), ev: Checked{Pulled: pulled},
			os: booted, pol: recheck, wantPhase: state.Releasing, wantAct: ActRelease,
			check: func(t *testing.T, s state.State, a Action) {
				if !a.Withdraw || !s.Failures[tgt.Checksum].SetAside {
					t.Errorf("action %+v, failures %+v", a, s.Failures)
				}
			}},
		{name: "holding the slot, still offered: prechecks", st: rec(state.HoldingSlot), ev: Checked{Target: &tgt}, os: staged, pol: recheck,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "holding the slot, a newer release offered: this reboot goes on", st: rec(state.HoldingSlot), ev: Checked{Target: &other}, os: staged, pol: recheck,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "holding the slot, graph unreachable: prechecks, saying so", st: rec(state.HoldingSlot), ev: Checked{Err: errBoom}, os: staged, pol: recheck,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck, wantWhy: "could not check that the update source still offers the staged release (boom)"},
		{name: "without recheck: staging done, queue at once", st: rec(state.Staging), ev: StageDone{}, os: staged,
			wantPhase: state.Staged, wantAct: ActQueryOrder},
	})
}

// The engine takes a check's PulledRelease, however wrapped, for a check
// that succeeded and found the staged release pulled.
func TestCheckedPulled(t *testing.T) {
	ev := checked(nil, fmt.Errorf("checking the update graph: %w", pulledErr{"new"}))
	if ev.Err != nil || ev.Pulled == nil || ev.Pulled.Checksum != "new" || ev.Pulled.Message != "checking the update graph: release new was pulled: gone" {
		t.Fatalf("%+v", ev)
	}
	if ev := checked(nil, errBoom); ev.Err != errBoom || ev.Pulled != nil {
		t.Fatalf("%+v", ev)
	}
}

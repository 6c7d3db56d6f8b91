package engine

import (
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// The notice and the logged-in delay (issue 18): after the hooks the people
// on the host are told first; while users are logged in the last checks
// wait up to reboot.logged_in_delay; the gates, quorum, leadership and the
// fence come after it, so a gate closing during the delay holds the reboot.
func TestDecideNoticeThenDelay(t *testing.T) {
	delay := func(p *Policy) { p.LoggedInDelay = 5 * time.Minute }
	toldAt := func(ago time.Duration) func(*state.State) {
		return func(s *state.State) { s.HooksRan, s.Noticed = true, t0.Add(-ago) }
	}
	noticedAt := func(want time.Time) func(*testing.T, state.State, Action) {
		return func(t *testing.T, s state.State, a Action) {
			if !s.Noticed.Equal(want) {
				t.Errorf("noticed %v, want %v", s.Noticed, want)
			}
		}
	}
	until := func(want time.Time) func(*testing.T, state.State, Action) {
		return func(t *testing.T, s state.State, a Action) {
			if !a.Until.Equal(want) {
				t.Errorf("until %v, want %v", a.Until, want)
			}
		}
	}
	runDecide(t, []decideCase{
		{name: "drained, all clear: tell first (no fence, no leader move yet)", st: rec(state.HoldingSlot, drained), ev: Prechecked{Safe: true, Leader: true},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActNotify, check: noticedAt(t0)},
		{name: "drained, not safe: no notice of a reboot that waits", st: rec(state.HoldingSlot, drained), ev: Prechecked{Reason: "m2 unhealthy"},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "m2 unhealthy", check: noticedAt(time.Time{})},
		{name: "drained, a gate holds: no notice", st: rec(state.HoldingSlot, drained), ev: Prechecked{Safe: true, Gated: "alerts: x"},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "reboot gate", check: noticedAt(time.Time{})},
		{name: "told: the checks follow", st: rec(state.HoldingSlot, toldAt(0)), ev: NoticeDone{}, os: staged, pol: delay,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck, check: noticedAt(t0)},
		{name: "users logged in during the delay: wait, look again soon", st: rec(state.HoldingSlot, toldAt(0)), ev: Prechecked{Safe: true, LoggedIn: 2},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "2 session(s) logged in", check: until(t0.Add(10 * time.Second))},
		{name: "sessions unknown during the delay: wait", st: rec(state.HoldingSlot, toldAt(0)), ev: Prechecked{Safe: true, LoggedIn: -1},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "cannot count"},
		{name: "the wait ends with the delay", st: rec(state.HoldingSlot, toldAt(5*time.Minute-3*time.Second)), ev: Prechecked{Safe: true, LoggedIn: 2},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, check: until(t0.Add(3 * time.Second))},
		{name: "a leader during the delay: no move yet", st: rec(state.HoldingSlot, toldAt(0)), ev: Prechecked{Safe: true, Leader: true, LoggedIn: 1},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "logged in"},
		{name: "nobody logged in: fence at once", st: rec(state.HoldingSlot, toldAt(0)), ev: Prechecked{Safe: true},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActFence},
		{name: "delay over, users still there: fence", st: rec(state.HoldingSlot, toldAt(5*time.Minute)), ev: Prechecked{Safe: true, LoggedIn: 2},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActFence},
		{name: "no delay configured: fence", st: rec(state.HoldingSlot, toldAt(0)), ev: Prechecked{Safe: true, LoggedIn: 2},
			os: staged, wantPhase: state.HoldingSlot, wantAct: ActFence},
		{name: "a gate closing during the delay holds the reboot", st: rec(state.HoldingSlot, toldAt(time.Minute)), ev: Prechecked{Safe: true, LoggedIn: 2, Gated: "etcd-alarms: NOSPACE"},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "reboot gate: etcd-alarms: NOSPACE"},
		{name: "a gate still closed after the delay holds the reboot", st: rec(state.HoldingSlot, toldAt(time.Hour)), ev: Prechecked{Safe: true, Gated: "alerts: x"},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "reboot gate: alerts: x"},
		{name: "quorum lost during the delay holds the reboot", st: rec(state.HoldingSlot, toldAt(time.Hour)), ev: Prechecked{Reason: "m3 unhealthy"},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActWait, wantWhy: "m3 unhealthy"},
		{name: "the slot lost during the delay: no finalize, the notice is dropped", st: rec(state.HoldingSlot, toldAt(time.Minute)), ev: Prechecked{SlotLost: true},
			os: staged, pol: delay, wantPhase: state.Staged, wantAct: ActQueryOrder, check: noticedAt(time.Time{})},
		{name: "after the delay, a leader moves leadership", st: rec(state.HoldingSlot, toldAt(time.Hour)), ev: Prechecked{Safe: true, Leader: true},
			os: staged, pol: delay, wantPhase: state.HoldingSlot, wantAct: ActMoveLeader},
		{name: "a fence before the notice (stale): checks first", st: rec(state.HoldingSlot, drained), ev: FenceDone{}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck},
		{name: "fence after the notice: finalize", st: rec(state.HoldingSlot, toldAt(time.Hour)), ev: FenceDone{}, os: staged,
			wantPhase: state.Finalizing, wantAct: ActFinalize},
		{name: "restart after the notice: hooks and notice again", st: rec(state.HoldingSlot, toldAt(time.Minute)), ev: Adopted{Lease: LeaseHolding}, os: staged,
			wantPhase: state.HoldingSlot, wantAct: ActPrecheck, check: noticedAt(time.Time{})},
		{name: "window closed during the delay: release, notice dropped", st: rec(state.HoldingSlot, toldAt(time.Minute)), ev: Prechecked{Safe: true, LoggedIn: 2},
			os: staged, pol: func(p *Policy) { delay(p); p.Window = hours{5, 6} }, wantPhase: state.Releasing, wantAct: ActRelease, check: noticedAt(time.Time{})},
	})
}

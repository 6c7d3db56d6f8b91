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

// decideCase is one decision: a record and an event in a world, and what
// must come of it.
type decideCase struct {
	name      string
	st        state.State
	ev        Event
	os        OSStatus
	boot      string
	pol       func(*Policy)
	updateNow bool
	obs       func(*Obs) // changes to the observation (default: recovered, boot b1)
	at        time.Time  // the wall clock (default t0)
	wantPhase state.Phase
	wantAct   ActionKind
	wantWhy   string // substring of the action's reason
	check     func(t *testing.T, s state.State, a Action)
}

// Modifiers of the cases' records and policies.
var other = state.Target{Checksum: "newer", Version: "3"}

func failed(n int, setAside bool) func(*state.State) {
	return func(s *state.State) {
		s.Failures = map[string]state.Failure{tgt.Checksum: {Count: n, SetAside: setAside, RetryAt: t0.Add(time.Hour), LastError: "x"}}
	}
}

func lease(s *state.State)      { s.Queued = true }
func checkLater(s *state.State) { s.NextCheck = t0.Add(24 * time.Hour) }
func shut(p *Policy)            { p.Window = hours{5, 6} } // opens in 2h
func unlocked(s *state.State)   { s.Locked = "" }
func drained(s *state.State)    { s.HooksRan = true }

// told: drained, and the people on the host were told an hour ago.
func told(s *state.State) { s.HooksRan, s.Noticed = true, t0.Add(-time.Hour) }

// runDecide runs each case through Decide in the current boot "b1" (unless
// it says otherwise) at t0.
func runDecide(t *testing.T, cases []decideCase) {
	t.Helper()
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
			if c.obs != nil {
				c.obs(&obs)
			}
			now := c.at
			if now.IsZero() {
				now = t0
			}
			st, act := Decide(c.st, c.ev, obs, pol, now)
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

// Start and resume, the check for updates, staging.
func TestDecideStartCheckStage(t *testing.T) {
	runDecide(t, []decideCase{
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
		{name: "rpm-ostree busy with another transaction: not a failure, wait and stage again", st: rec(state.Staging, failed(2, false)),
			ev: StageDone{Err: fmt.Errorf("an operator's PkgChange: %w", ErrBusy)}, os: booted, wantPhase: state.Idle, wantAct: ActWait, wantWhy: "busy: ",
			check: func(t *testing.T, s state.State, a Action) {
				if f := s.Failures[tgt.Checksum]; f.Count != 2 || f.SetAside || a.Failed != "" || !s.NextCheck.Equal(a.Until) {
					t.Errorf("failure %+v, action %+v, next check %v", f, a, s.NextCheck)
				}
			}},
		{name: "check meets a busy rpm-ostree: busy, soon again", st: rec(state.Idle), ev: Checked{Err: fmt.Errorf("checking: %w", ErrBusy)}, os: booted,
			wantPhase: state.Idle, wantAct: ActWait, wantWhy: "busy: checking for updates"},
		{name: "crash while staging, staging finished: staged", st: rec(state.Staging), ev: Recovered{}, os: staged, wantPhase: state.Staged, wantAct: ActQueryOrder},
		{name: "crash while staging, nothing staged: stage again", st: rec(state.Staging), ev: Recovered{}, os: booted, wantPhase: state.Staging, wantAct: ActStage},
	})
}

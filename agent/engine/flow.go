package engine

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"

	"github.com/update-agent/update-agent/agent/state"
)

// The flow in one place: for each event, the phases it can arrive in and
// the step that handles it there. Decide dispatches through this table and
// nothing else; FLOW.md is rendered from it (TestGoldenTrace) next to the
// traces of a whole cycle (TestGoldenTrace).
//
// An event arriving in a phase the table does not list is stale (a bug, or
// a record changed under the engine): it is handled as ticked, which
// re-evaluates from the record instead of acting on the result.
var flow = []route{
	{ev: Started{}, steps: every(on((*decider).onStarted))},
	// A wait ended: continue the phase. Until the stager's recovery has
	// succeeded in this process, every tick retries it first.
	{ev: Ticked{}, first: (*decider).recoverFirst, steps: map[state.Phase]step{
		state.Idle:        at((*decider).idle),
		state.Staging:     at((*decider).stage),
		state.Staged:      at((*decider).staged),
		state.WaitingSlot: at((*decider).acquire),
		state.HoldingSlot: at((*decider).lastChecks),
		state.Finalizing:  at((*decider).awaitReboot),
		state.Verifying:   at((*decider).verify),
		state.Releasing:   at((*decider).release),
	}},
	// The first thing a new process does: resume the persisted phase
	// (a failed recovery is retried first).
	{ev: Recovered{}, first: (*decider).retryRecovery, steps: map[state.Phase]step{
		state.Idle:        at((*decider).idle),
		state.Staging:     at((*decider).resumeStaging),
		state.Staged:      at((*decider).staged),
		state.WaitingSlot: at((*decider).resumeLease),
		state.HoldingSlot: at((*decider).resumeLease),
		state.Finalizing:  at((*decider).resumeFinalizing),
		state.Verifying:   at((*decider).resumeLease),
		state.Releasing:   at((*decider).release),
	}},
	// 1. Check for an update.
	// (And once more with the slot held, before the hooks, for a source
	// that can say a release was pulled: Policy.RecheckStaged.)
	{ev: Checked{}, steps: in(on((*decider).onChecked), state.Idle, state.Staged, state.HoldingSlot)},
	// 2. Stage it gently, locked for finalization.
	{ev: CleanedUp{}, steps: in(on((*decider).onCleanedUp), state.Idle, state.Staging, state.Releasing)},
	{ev: StageDone{}, steps: in(on((*decider).onStageDone), state.Staging)},
	// 3. Wait for a window, then take a slot (followers first).
	{ev: OrderQueried{}, steps: in(on((*decider).onOrderQueried), state.Staged)},
	{ev: SlotHeld{}, steps: in(on((*decider).onSlotHeld), state.WaitingSlot)},
	{ev: Adopted{}, steps: in(on((*decider).onAdopted), state.WaitingSlot, state.HoldingSlot, state.Verifying)},
	// 4. Quorum, health and gates first, then the pre-reboot hooks; a
	// failed hook gives the slot back and keeps the staged update locked.
	// 5. Tell the people on the host, wait for logged-in users (up to the
	// logged-in delay), then re-check window, gates, leadership and
	// quorum, fence, finalize.
	{ev: Prechecked{}, steps: in(on((*decider).onPrechecked), state.HoldingSlot)},
	{ev: HooksDone{}, steps: in(on((*decider).onHooksDone), state.HoldingSlot)},
	{ev: NoticeDone{}, steps: in(on((*decider).onNoticeDone), state.HoldingSlot)},
	{ev: LeaderMoved{}, steps: in(on((*decider).onLeaderMoved), state.HoldingSlot)},
	{ev: FenceDone{}, steps: in(on((*decider).onFenceDone), state.HoldingSlot)},
	{ev: FinalizeDone{}, steps: in(on((*decider).onFinalizeDone), state.Finalizing)},
	// 6. After boot: verify, then release.
	{ev: VerifyDone{}, steps: in(on((*decider).onVerifyDone), state.Verifying, state.Releasing)},
	{ev: Released{}, steps: in(on((*decider).onReleased), state.Releasing)},
}

// route is one row of the flow: an event (a zero value names it), what
// comes before any phase's step, and its step in each phase it can arrive
// in.
type route struct {
	ev    Event
	first guard
	steps map[state.Phase]step
}

// guard decides instead of the phase's step when it returns true.
type guard func(*decider, Event) (Action, bool)

// step is a named handler; the name is the method's, so the rendered table
// cannot drift from the code.
type step struct {
	name string
	run  func(*decider, Event) Action
}

// on makes a step of a method handling one event type.
func on[E Event](f func(*decider, E) Action) step {
	return step{name: funcName(f), run: func(d *decider, ev Event) Action { return f(d, ev.(E)) }}
}

// at makes a step of a method that continues the current phase; the event
// carries nothing it needs.
func at(f func(*decider) Action) step {
	return step{name: funcName(f), run: func(d *decider, _ Event) Action { return f(d) }}
}

func funcName(f any) string {
	n := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
	return strings.TrimSuffix(n[strings.LastIndex(n, ".")+1:], "-fm")
}

func in(s step, phases ...state.Phase) map[state.Phase]step {
	m := make(map[state.Phase]step, len(phases))
	for _, p := range phases {
		m[p] = s
	}
	return m
}

func every(s step) map[state.Phase]step { return in(s, state.Phases...) }

// routes indexes flow by event name. (Built in init: the steps dispatch
// through it, a cycle a variable's initializer may not have.)
var routes map[string]route

func init() {
	routes = make(map[string]route, len(flow))
	for _, r := range flow {
		routes[r.ev.eventName()] = r
	}
}

// decide dispatches ev through the flow table.
func (d *decider) decide(ev Event) Action {
	r, ok := routes[ev.eventName()]
	if !ok {
		panic(fmt.Sprintf("engine: unknown event %T", ev))
	}
	s, ok := r.steps[d.st.Phase]
	if _, tick := ev.(Ticked); !ok && !tick {
		return d.decide(Ticked{}) // stale: re-evaluate from the record
	}
	if r.first != nil {
		if act, ok := r.first(d, ev); ok {
			return act
		}
	}
	if !ok {
		panic(fmt.Sprintf("engine: unknown phase %q", d.st.Phase))
	}
	return s.run(d, ev)
}

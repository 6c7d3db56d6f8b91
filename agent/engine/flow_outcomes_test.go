package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// outcomes sweeps Decide over every cell of the flow table with a spread of
// event results, records, host states and policies, and collects what each
// cell can lead to: the next action and the phase persisted with it. FLOW.md
// lists them, so a change of behaviour anywhere in the sweep shows as a diff.
func outcomes() map[[2]string][]string {
	errOther := fmt.Errorf("finalize: %w", errBoom)
	events := []Event{
		Started{}, Ticked{}, Recovered{}, Recovered{Err: errBoom},
		Checked{Target: &tgt}, Checked{}, Checked{Err: errBoom}, Checked{Target: &state.Target{Checksum: "newer"}},
		Checked{Pulled: &Pulled{Checksum: tgt.Checksum, Message: "release 2 (new) was pulled: gone"}},
		StageDone{}, StageDone{Err: errBoom}, CleanedUp{}, CleanedUp{Err: errBoom},
		OrderQueried{QueueOrder: QueueOrder{MayQueue: true}}, OrderQueried{Err: errBoom},
		SlotHeld{LeaseID: 7}, SlotHeld{Err: errBoom},
		Adopted{Lease: LeaseHolding}, Adopted{Lease: LeaseWaiting}, Adopted{Lease: LeaseGone}, Adopted{Err: errBoom},
		HooksDone{}, HooksDone{Err: errBoom},
		Prechecked{Safe: true}, Prechecked{}, Prechecked{Safe: true, Leader: true}, Prechecked{SlotLost: true},
		Prechecked{Refused: true, Reason: "2 members"}, Prechecked{Safe: true, Gated: "alarm"}, Prechecked{Err: errBoom},
		Prechecked{Safe: true, LoggedIn: 2}, Prechecked{Safe: true, LoggedIn: -1}, NoticeDone{},
		LeaderMoved{}, LeaderMoved{Err: errBoom},
		FenceDone{}, FenceDone{Err: ErrSlotLost}, FenceDone{Err: errBoom},
		FinalizeDone{}, FinalizeDone{Err: ErrNoStagedDeployment}, FinalizeDone{Err: ErrInhibited}, FinalizeDone{Err: errOther},
		VerifyDone{Healthy: true}, VerifyDone{Reason: "lagging"}, VerifyDone{BootPending: true}, VerifyDone{Err: errBoom},
		Released{}, Released{Err: errBoom},
	}
	records := func(p state.Phase) []state.State {
		var out []state.State
		for _, ran := range []int{0, 1, 2} { // hooks not run, run, run and people told
			for _, queued := range []bool{false, true} {
				for _, f := range []state.Failure{{}, {Count: 1, RetryAt: t0.Add(time.Hour)}, {Count: 3, SetAside: true}} {
					for _, later := range []bool{false, true} {
						s := rec(p)
						s.HooksRan, s.Queued = ran > 0, queued
						if ran == 2 {
							s.Noticed = t0
						}
						if f.Count > 0 {
							s.Failures = map[string]state.Failure{tgt.Checksum: f}
						}
						if later {
							s.NextCheck, s.CheckHealth = t0.Add(time.Hour), queued
						}
						out = append(out, s)
					}
				}
			}
		}
		return out
	}
	policies := []func(*Policy){
		func(*Policy) {},
		func(p *Policy) { p.Window = never{} },
		func(p *Policy) { p.MoveLeader = false },
		func(p *Policy) { p.RequireSafe = false },
		func(p *Policy) { p.Disabled = true },
		func(p *Policy) { p.LoggedInDelay = time.Minute },
		func(p *Policy) { p.RecheckStaged = true },
	}
	seen := map[[2]string]map[string]bool{}
	for _, r := range flow {
		for p := range r.steps {
			key := [2]string{string(p), r.ev.eventName()}
			seen[key] = map[string]bool{}
			for _, ev := range events {
				if ev.eventName() != r.ev.eventName() {
					continue
				}
				for _, st := range records(p) {
					for _, os := range []OSStatus{booted, staged, foreign, rebootd} {
						for _, mod := range policies {
							pol := testPolicy()
							mod(&pol)
							for _, boot := range []string{"b1", "b2"} {
								for _, recovered := range []bool{true, false} {
									next, act := Decide(st, ev, Obs{BootID: boot, OS: os, Recovered: recovered, Rand: 0.5}, pol, t0)
									seen[key][fmt.Sprintf("%s → %s", act.Kind, next.Phase)] = true
								}
							}
						}
					}
				}
			}
		}
	}
	out := map[[2]string][]string{}
	for k, set := range seen {
		for o := range set {
			out[k] = append(out[k], o)
		}
		slices.Sort(out[k])
	}
	return out
}

// outcomesTable renders outcomes in flow order, one row per cell.
func outcomesTable() string {
	o := outcomes()
	var b strings.Builder
	b.WriteString("| phase | event | step | can lead to (action → phase persisted) |\n|---|---|---|---|\n")
	for _, r := range flow {
		for _, p := range state.Phases {
			s, ok := r.steps[p]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", p, r.ev.eventName(), s.name, strings.Join(o[[2]string{string(p), r.ev.eventName()}], ", "))
		}
	}
	return b.String()
}

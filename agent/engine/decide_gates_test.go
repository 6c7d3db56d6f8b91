package engine

import (
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/state"
)

// The reboot gates (issue 18): a holding gate keeps the node from draining,
// and from finalizing after the drain; a boot systemd has not judged good
// keeps the slot; the release after a verified reboot starts the spacing.
func TestDecideGates(t *testing.T) {
	drained := func(s *state.State) { s.HooksRan = true }
	cases := []struct {
		name     string
		st       state.State
		ev       Event
		os       OSStatus
		wantAct  ActionKind
		wantWhy  string
		rebooted bool
	}{
		{name: "gate holds before the hooks: no drain", st: rec(state.HoldingSlot), ev: Prechecked{Safe: true, Gated: "alerts: firing: EtcdNoLeader"}, os: staged,
			wantAct: ActWait, wantWhy: "not draining yet; reboot gate: alerts: firing: EtcdNoLeader"},
		{name: "no gate before the hooks: drain", st: rec(state.HoldingSlot), ev: Prechecked{Safe: true}, os: staged, wantAct: ActRunHooks},
		{name: "gate holds after the hooks: no finalize", st: rec(state.HoldingSlot, drained), ev: Prechecked{Safe: true, Gated: "etcd-alarms: active etcd alarm: NOSPACE on m1"}, os: staged,
			wantAct: ActWait, wantWhy: "reboot gate: etcd-alarms: active etcd alarm: NOSPACE on m1"},
		{name: "gate holds a leader too: no leader move", st: rec(state.HoldingSlot, drained), ev: Prechecked{Safe: true, Leader: true, Gated: "spacing: x"}, os: staged,
			wantAct: ActWait, wantWhy: "reboot gate: spacing"},
		{name: "no gate after the hooks: tell the people on the host", st: rec(state.HoldingSlot, drained), ev: Prechecked{Safe: true}, os: staged, wantAct: ActNotify},
		{name: "no gate after the notice and the delay: fence", st: rec(state.HoldingSlot, told), ev: Prechecked{Safe: true}, os: staged, wantAct: ActFence},
		{name: "a lost slot outranks a gate", st: rec(state.HoldingSlot, drained), ev: Prechecked{SlotLost: true, Gated: "alerts: x"}, os: staged, wantAct: ActQueryOrder},
		{name: "boot not complete: keep the slot", st: rec(state.Verifying), ev: VerifyDone{BootPending: true}, os: rebootd,
			wantAct: ActWait, wantWhy: "until systemd reports the boot complete (boot-complete.target)"},
		{name: "verified reboot: release starts the spacing", st: rec(state.Verifying), ev: VerifyDone{Healthy: true}, os: rebootd,
			wantAct: ActRelease, rebooted: true},
		{name: "release after a failed hook: no spacing", st: rec(state.HoldingSlot), ev: HooksDone{Err: errBoom}, os: staged, wantAct: ActRelease},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, act := Decide(c.st, c.ev, Obs{BootID: "b1", OS: c.os, Recovered: true, Rand: 0.5}, testPolicy(), t0)
			if act.Kind != c.wantAct || !strings.Contains(act.Reason, c.wantWhy) {
				t.Fatalf("action %s %q, want %s containing %q", act.Kind, act.Reason, c.wantAct, c.wantWhy)
			}
			if act.Rebooted != c.rebooted {
				t.Fatalf("rebooted = %v, want %v", act.Rebooted, c.rebooted)
			}
		})
	}
}

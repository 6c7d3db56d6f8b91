package cycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// TestNOSPACEAlarmHoldsTheReboot: a real NOSPACE alarm (a member with a
// small backend quota, written full) holds the node with its slot, before
// the drain; once an operator compacts, defragments and disarms, the node
// reboots into the update.
func TestNOSPACEAlarmHoldsTheReboot(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, QuotaBackendBytes: 1 << 20})
	cli := c.Client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rev := etcdtest.FillBackend(t, ctx, cli)

	a := newSolo(t)
	a.gates = adapters.Gates{C: &gates.Checker{Etcd: cli}, Node: "n1", Log: a.log}
	target := a.env.Publish(a.env.Ref, 1)
	a.start()
	a.waitStaged(target)
	a.win.mu.Lock()
	a.win.open = true
	a.win.mu.Unlock()
	a.wait("held by the NOSPACE gate before the drain", func(s engine.Snapshot) bool {
		return s.State.Phase == state.HoldingSlot && !s.State.HooksRan &&
			strings.Contains(s.Action.Reason, "not draining yet; reboot gate: etcd-alarms: active etcd alarm: NOSPACE on m0")
	})
	// Several rechecks later it still holds. Each recheck runs the last
	// checks (ActPrecheck) and holds again on the gate: a snapshot may
	// catch either, never the drain (seen: one taken mid-precheck failed
	// a check that wanted the gate's reason only).
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		s := a.eng.Snapshot()
		held := strings.Contains(s.Action.Reason, "NOSPACE") || s.Action.Kind == engine.ActPrecheck
		if s.State.Phase != state.HoldingSlot || s.State.HooksRan || !held {
			t.Fatalf("stopped holding while the alarm is active: %+v", s)
		}
	}
	a.wait("still held by the NOSPACE gate", func(s engine.Snapshot) bool {
		return s.State.Phase == state.HoldingSlot && strings.Contains(s.Action.Reason, "NOSPACE")
	})
	if a.env.Rebooted() {
		t.Fatal("finalized while NOSPACE is active")
	}

	etcdtest.FreeAndDisarm(t, ctx, cli, c.Members[0].ClientURL, rev)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if !standintest.WaitFor(wctx, a.env.Rebooted) {
		t.Fatalf("no finalize after the alarm was disarmed: %+v", a.eng.Snapshot())
	}
	if !strings.Contains(a.logb.String(), "no active etcd alarm") {
		t.Error("the journal does not say the alarm gate cleared")
	}
}

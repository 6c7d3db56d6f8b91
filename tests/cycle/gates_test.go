package cycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

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
	rev := fillBackend(t, ctx, cli)

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
	// Several rechecks later it still holds.
	time.Sleep(time.Second)
	if s := a.eng.Snapshot(); s.State.Phase != state.HoldingSlot || !strings.Contains(s.Action.Reason, "NOSPACE") {
		t.Fatalf("stopped holding while the alarm is active: %+v", s)
	}
	if a.env.Rebooted() {
		t.Fatal("finalized while NOSPACE is active")
	}

	disarm(t, ctx, cli, c.Members[0].ClientURL, rev)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if !standintest.WaitFor(wctx, a.env.Rebooted) {
		t.Fatalf("no finalize after the alarm was disarmed: %+v", a.eng.Snapshot())
	}
	if !strings.Contains(a.logb.String(), "no active etcd alarm") {
		t.Error("the journal does not say the alarm gate cleared")
	}
}

// fillBackend writes until etcd refuses with "database space exceeded" and
// returns the last revision written.
func fillBackend(t *testing.T, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	val := strings.Repeat("x", 64<<10)
	var rev int64
	for i := 0; i < 200; i++ {
		resp, err := cli.Put(ctx, "fill", val)
		if err != nil {
			if strings.Contains(err.Error(), "database space exceeded") {
				return rev
			}
			t.Fatalf("filling the backend: %v", err)
		}
		rev = resp.Header.Revision
	}
	t.Fatal("a 1 MiB quota never filled")
	return 0
}

// disarm frees the space and disarms every alarm, as an operator does.
func disarm(t *testing.T, ctx context.Context, cli *clientv3.Client, endpoint string, rev int64) {
	t.Helper()
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, endpoint); err != nil {
		t.Fatal(err)
	}
	list, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Alarms {
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
			t.Fatal(err)
		}
	}
}

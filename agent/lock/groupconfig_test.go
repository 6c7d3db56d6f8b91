package lock_test

import (
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/lock"
)

// TestStatusUsesRecordedSlots: agents of a group with 2 slots queue three
// nodes; `lock status` run where lock.slots is 1 (another group's host, or
// a stale configuration) still shows two holders, because the agents
// recorded their count in etcd when they queued.
func TestStatusUsesRecordedSlots(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 30*time.Second)
	for _, n := range []string{"a", "b"} {
		l := f.lock(f.opts(n, 2, 30*time.Second, ""))
		defer l.Close()
		if _, err := l.Acquire(ctx, "t1", nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, group := range []string{"", "workers"} {
		st, err := lock.Status(ctx, f.cli, "/update-agent", 1, group, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != 1 || st[0].Slots != 2 || st[0].SlotsBy != "agent a" || len(st[0].Holders) != 2 {
			t.Fatalf("status (group %q) read where lock.slots = 1: %+v", group, st)
		}
	}
	// A group nobody recorded (older agents) falls back to the local count.
	if _, err := f.cli.Delete(ctx, lock.GroupConfigKey("/update-agent", "workers")); err != nil {
		t.Fatal(err)
	}
	st, err := lock.Status(ctx, f.cli, "/update-agent", 1, "", time.Now())
	if err != nil || len(st) != 1 || st[0].Slots != 1 || st[0].SlotsBy != "" || len(st[0].Holders) != 1 {
		t.Fatalf("status without a recorded count: %+v, %v", st, err)
	}
}

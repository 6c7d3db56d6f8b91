package lock_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/lock"
)

// TestDuplicateNodeNames: two hosts with one node name (agent.node_name
// defaults to the host name) but their own machine IDs. The second never
// takes over the first one's key: its Acquire and Adopt fail naming the
// conflict, the first keeps its slot, and its announcement stays.
func TestDuplicateNodeNames(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 20*time.Second)
	oa := f.opts("web", 1, 30*time.Second, "")
	oa.MachineID = "aaaa"
	ob := f.opts("web", 1, 30*time.Second, "")
	ob.MachineID = "bbbb"
	a, b := f.lock(oa), f.lock(ob)
	if err := a.Announce(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	_, err := b.Acquire(ctx, "c1", nil)
	if !errors.Is(err, lock.ErrNodeNameConflict) || !strings.Contains(err.Error(), "aaaa") || !strings.Contains(err.Error(), "bbbb") {
		t.Fatalf("second machine's Acquire: %v; want a conflict naming both machine IDs", err)
	}
	if _, _, _, err := b.Adopt(ctx); !errors.Is(err, lock.ErrNodeNameConflict) {
		t.Errorf("second machine's Adopt: %v; want a conflict", err)
	}
	if err := b.Announce(ctx, "c2"); !errors.Is(err, lock.ErrNodeNameConflict) {
		t.Errorf("second machine's Announce: %v; want a conflict", err)
	}
	if err := b.Withdraw(ctx); err != nil {
		t.Errorf("second machine's Withdraw: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("second machine's Release: %v", err)
	}
	if err := a.Fenced(ctx, clientv3.OpPut("/update-agent/workers/note", "x")); err != nil {
		t.Errorf("first machine lost its slot to a host of the same name: %v", err)
	}
	if pend, _, err := a.Pending(ctx); err != nil || len(pend) != 1 || pend[0].MachineID != "aaaa" || pend[0].Target != "c1" {
		t.Errorf("announcements: %+v, %v; want the first machine's", pend, err)
	}
	st, err := lock.Status(ctx, f.cli, "/update-agent", 1, "workers", time.Now())
	if err != nil || len(st) != 1 || len(st[0].Holders) != 1 || st[0].Holders[0].MachineID != "aaaa" {
		t.Errorf("status: %+v, %v", st, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the first is gone the name is free for the other machine.
	if _, err := b.Acquire(ctx, "c1", nil); err != nil {
		t.Errorf("second machine after the first released: %v", err)
	}
}

// TestSlotsNeverExceededWithDuplicateNames: 12 sessions, every node name used
// by two machines, contend for 2 slots; never more than 2 hold at once, and
// every name is served by exactly one of its machines at a time.
func TestSlotsNeverExceededWithDuplicateNames(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 30*time.Second)
	const names, slots = 6, 2
	var inside, maxInside, served, conflicts atomic.Int32
	var wg sync.WaitGroup
	for i := range names * 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := f.opts(fmt.Sprintf("n%d", i%names), slots, 30*time.Second, "")
			o.MachineID = fmt.Sprintf("m%02d", i)
			l := f.lock(o)
			_, err := l.Acquire(ctx, "c1", nil)
			if errors.Is(err, lock.ErrNodeNameConflict) {
				conflicts.Add(1)
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			inside.Add(-1)
			served.Add(1)
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if m := maxInside.Load(); m > slots {
		t.Errorf("%d sessions held at once with %d slots", m, slots)
	}
	if served.Load()+conflicts.Load() != names*2 || conflicts.Load() == 0 {
		t.Errorf("served %d, refused for a name conflict %d", served.Load(), conflicts.Load())
	}
	t.Logf("served %d, refused %d, max holders %d", served.Load(), conflicts.Load(), maxInside.Load())
}

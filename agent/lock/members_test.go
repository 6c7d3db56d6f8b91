package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestOneMemberDownAtATime: every member of a real 3- and 5-member cluster
// runs on a node of its own, the nodes split over two groups with 2 slots
// each, so the groups alone would let up to 4 members go down together.
// Each node takes its slot, "reboots" (its member stops, then comes back)
// and releases. The member slot keeps it to one member down at a time, and
// every node gets its turn.
func TestOneMemberDownAtATime(t *testing.T) {
	for _, members := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			c := etcdtest.Start(t, etcdtest.Options{Members: members})
			ctx := ctxT(t, 90*time.Second)
			var down, maxDown, served atomic.Int32
			var wg sync.WaitGroup
			for i := range members {
				l, err := lock.New(c.Client(t, nil), lock.Options{Prefix: "/update-agent", Group: fmt.Sprintf("g%d", i%2),
					Slots: 2, TTL: 30 * time.Second, Node: fmt.Sprintf("n%d", i), Member: c.Members[i].Name,
					MachineID: fmt.Sprintf("m%d", i), StateDir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Another member going down can break a request in
					// flight: like the engine, try again.
					if err := retry(ctx, func() error { _, err := l.Acquire(ctx, "c1", nil); return err }); err != nil {
						t.Errorf("n%d: %v", i, err)
						return
					}
					n := down.Add(1)
					for m := maxDown.Load(); n > m && !maxDown.CompareAndSwap(m, n); m = maxDown.Load() {
					}
					c.Stop(i)
					time.Sleep(100 * time.Millisecond)
					err := c.Restart(i)
					down.Add(-1)
					if err != nil {
						t.Errorf("n%d: %v", i, err)
						return
					}
					var pos lock.Position
					var found bool
					err = retry(ctx, func() (err error) { _, pos, found, err = l.Adopt(ctx); return err })
					if err != nil || !found || !pos.Holder {
						t.Errorf("n%d back: holder %v found %v: %v", i, pos.Holder, found, err)
					}
					served.Add(1)
					if err := retry(ctx, func() error { return l.Release(ctx) }); err != nil {
						t.Errorf("n%d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			if m := maxDown.Load(); m != 1 {
				t.Errorf("%d members down at once; want exactly 1", m)
			}
			if s := served.Load(); s != int32(members) {
				t.Errorf("%d of %d nodes served", s, members)
			}
			st, err := lock.Status(ctx, c.Client(t, nil), "/update-agent", 2, "", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range st {
				if len(g.Holders)+len(g.Waiters) != 0 {
					t.Errorf("queue of %s not empty at the end: %+v", g.Group, g)
				}
			}
		})
	}
}

// retry runs f until it succeeds or ctx ends, as the engine retries a step
// whose etcd request failed.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || ctx.Err() != nil || errors.Is(err, lock.ErrLeaseExpired) || errors.Is(err, lock.ErrNodeNameConflict) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

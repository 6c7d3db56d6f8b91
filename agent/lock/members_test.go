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

// TestPromotedWorkerTakesMemberSlot: a node whose lock was built while it
// was a worker becomes an etcd member's host (its lookup now names the
// member) while the agent runs. Its fence fails while it holds only its
// group's slot, and the two groups then race: the promoted node waits for
// the member slot while the other member's node holds it, so the two
// members never go down together. Once it stops being a member it keeps the
// member slot until it releases, then takes none.
func TestPromotedWorkerTakesMemberSlot(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	ctx := ctxT(t, 60*time.Second)
	var n1Member atomic.Value
	n1Member.Store("")
	mk := func(i int, o lock.Options) *lock.Lock {
		o.Prefix, o.Group, o.Slots, o.TTL = "/ua", fmt.Sprintf("g%d", i), 2, 30*time.Second
		o.Node, o.MachineID, o.StateDir = fmt.Sprintf("n%d", i), fmt.Sprintf("m%d", i), t.TempDir()
		l, err := lock.New(c.Client(t, nil), o)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	n0 := mk(0, lock.Options{Member: c.Members[0].Name})
	n1 := mk(1, lock.Options{LocalMember: func(context.Context) (string, error) { return n1Member.Load().(string), nil }})
	members := func() (holders, waiters []string) {
		st, err := lock.Status(ctx, c.Client(t, nil), "/ua", 2, lock.MembersGroup, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range st {
			for _, e := range g.Holders {
				holders = append(holders, e.Node)
			}
			for _, e := range g.Waiters {
				waiters = append(waiters, e.Node)
			}
		}
		return holders, waiters
	}

	// A worker: its group's slot only.
	if _, err := n1.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	if err := n1.Fence(ctx); err != nil {
		t.Fatalf("worker's fence: %v", err)
	}
	// Promoted while holding: the fence must not let it reboot.
	n1Member.Store(c.Members[1].Name)
	if err := n1.Fence(ctx); !errors.Is(err, lock.ErrNotHolder) {
		t.Fatalf("fence of a node promoted to member without the member slot = %v; want ErrNotHolder", err)
	}
	if _, pos, found, err := n1.Adopt(ctx); err != nil || !found || pos.Holder {
		t.Fatalf("Adopt of a promoted node without the member slot = found %v holder %v, %v; want found, waiting", found, pos.Holder, err)
	}

	// The other group's member goes first; the promoted node must wait
	// for the member slot while n0 is "down".
	if _, err := n0.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	acquired := make(chan error, 1)
	go func() { _, err := n1.Acquire(ctx, "c1", nil); acquired <- err }()
	for {
		select {
		case err := <-acquired:
			t.Fatalf("the promoted node got through while the other member's node held the member slot (two members down): %v", err)
		default:
		}
		if _, w := members(); fmt.Sprint(w) == "[n1]" {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the promoted node never queued for the member slot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := n0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
	if err := n1.Fence(ctx); err != nil {
		t.Fatalf("fence with both slots: %v", err)
	}
	if h, _ := members(); fmt.Sprint(h) != "[n1]" {
		t.Fatalf("member slot holders %v; want [n1]", h)
	}

	// No longer a member: it keeps the member slot until it releases,
	// then takes none.
	n1Member.Store("")
	if err := n1.Fence(ctx); err != nil {
		t.Fatalf("fence after leaving the cluster, slots held: %v", err)
	}
	if err := n1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Acquire(ctx, "c2", nil); err != nil {
		t.Fatal(err)
	}
	if h, w := members(); len(h)+len(w) != 0 {
		t.Errorf("a worker again queued for the member slot: holders %v waiters %v", h, w)
	}
	if err := n1.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTakesMemberSlot(t *testing.T) {
	for _, tc := range []struct {
		member string
		queued bool
		want   bool
	}{
		{"", false, false},   // a worker
		{"cp1", false, true}, // a member, or a worker promoted since the last lookup
		{"cp1", true, true},  // a member that queued
		{"", true, true},     // left the cluster after queueing: kept until release
	} {
		if got := lock.TakesMemberSlot(tc.member, tc.queued); got != tc.want {
			t.Errorf("TakesMemberSlot(%q, %v) = %v, want %v", tc.member, tc.queued, got, tc.want)
		}
	}
}

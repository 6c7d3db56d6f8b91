package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/testlog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type fixture struct {
	t   *testing.T
	c   *etcdtest.Cluster
	cli *clientv3.Client
	log *slog.Logger
	buf *testlog.Buffer
}

func newFixture(t *testing.T) *fixture {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	buf := &testlog.Buffer{}
	return &fixture{t: t, c: c, cli: c.Client(t, nil), buf: buf,
		log: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

func (f *fixture) opts(node string, slots int, ttl time.Duration, stateDir string) lock.Options {
	if stateDir == "" {
		stateDir = f.t.TempDir()
	}
	return lock.Options{Prefix: "/update-agent", Group: "workers", Slots: slots, TTL: ttl,
		Node: node, BootID: "boot-" + node, StateDir: stateDir, Log: f.log}
}

func (f *fixture) lock(o lock.Options) *lock.Lock {
	l, err := lock.New(f.cli, o)
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestSlotsNeverExceeded: 60 nodes contend for 3 slots; some are killed at
// random (their lease revoked, as when a node dies for good) while waiting or
// holding. At no time do more than 3 believe they hold, and every survivor
// gets its turn.
func TestSlotsNeverExceeded(t *testing.T) {
	f := newFixture(t)
	const nodes, slots = 60, 3
	ctx := ctxT(t, 40*time.Second)
	var inside, maxInside, served, killed atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for i := 0; i < nodes; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := f.lock(f.opts(fmt.Sprintf("n%02d", i), slots, 30*time.Second, ""))
			kill := rand.IntN(5) == 0 // about 12 of 60 die
			var killedWaiting chan struct{}
			if kill && rand.IntN(2) == 0 {
				// Die while waiting: revoke the lease shortly after queueing.
				killedWaiting = make(chan struct{})
				go func() {
					defer close(killedWaiting)
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
					for l.Done() == nil {
						time.Sleep(time.Millisecond)
					}
					revokeOwnLease(ctx, t, f.cli, l)
				}()
			}
			_, err := l.Acquire(ctx, "c1", nil)
			if err != nil {
				if kill {
					killed.Add(1)
					return
				}
				errs <- fmt.Errorf("n%02d: %w", i, err)
				return
			}
			n := inside.Add(1)
			for {
				m := maxInside.Load()
				if n <= m || maxInside.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond)
			inside.Add(-1)
			served.Add(1)
			if killedWaiting != nil {
				// Got the slot before the waiting-kill fired: that one
				// revokes the lease, once.
				<-killedWaiting
				killed.Add(1)
				return
			}
			if kill {
				// Die while holding: the slot must come back via the lease.
				killed.Add(1)
				revokeOwnLease(ctx, t, f.cli, l)
				return
			}
			if err := l.Release(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := maxInside.Load(); m > slots || m < 2 {
		t.Errorf("at most %d nodes held at once; want between 2 and %d", m, slots)
	}
	t.Logf("served %d, killed %d, max concurrent holders %d", served.Load(), killed.Load(), maxInside.Load())
	st, err := lock.Status(ctx, f.cli, "/update-agent", slots, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range st {
		if len(g.Holders)+len(g.Waiters) != 0 {
			t.Errorf("queue not empty at the end: %+v", g)
		}
	}
}

// revokeOwnLease kills a holder the hard way: its lease disappears as if the
// TTL ran out.
func revokeOwnLease(ctx context.Context, t *testing.T, cli *clientv3.Client, l *lock.Lock) {
	id, err := l.LeaseID()
	if err != nil {
		t.Error(err)
		return
	}
	l.Close()
	if _, err := cli.Revoke(ctx, id); err != nil {
		t.Error(err)
	}
}

// TestFIFO: with one slot, waiters get it in the order they queued.
func TestFIFO(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 20*time.Second)
	first := f.lock(f.opts("first", 1, 30*time.Second, ""))
	if _, err := first.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		queued := make(chan lock.Position, 1)
		name := fmt.Sprintf("w%d", i)
		l := f.lock(f.opts(name, 1, 30*time.Second, ""))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Acquire(ctx, "c1", func(p lock.Position) {
				select {
				case queued <- p:
				default:
				}
			})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
		// Queue them one after another so the expected order is known.
		if p := <-queued; p.Holder || p.Ahead != i {
			t.Fatalf("%s queued at %+v, want %d waiters ahead", name, p, i)
		}
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := []string{"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("acquisition order %v, want %v", order, want)
	}
}

// TestReadoptAfterRestart: the holder "reboots" (the process is gone, keys
// stay on the lease); a new process with the same state dir re-adopts the
// lease and still holds the same slot, while a waiter still waits.
func TestReadoptAfterRestart(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 20*time.Second)
	dir := t.TempDir()
	o := f.opts("a", 1, 3*time.Second, dir)
	a := f.lock(o)
	if err := a.Announce(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	a.Close() // shutdown for the reboot: keepalives stop, lease stays

	b := f.lock(f.opts("b", 1, 30*time.Second, ""))
	bHeld := make(chan error, 1)
	go func() { _, err := b.Acquire(ctx, "c1", nil); bHeld <- err }()

	// Away for longer than one TTL/3 keepalive period but within the TTL.
	time.Sleep(1500 * time.Millisecond)
	a2 := f.lock(o)
	rec, pos, found, err := a2.Adopt(ctx)
	if err != nil || !found || !pos.Holder {
		t.Fatalf("Adopt = %+v, %+v, %v, %v; want the slot back", rec, pos, found, err)
	}
	if rec.Target != "c1" || rec.AcquiredAt.IsZero() {
		t.Errorf("adopted record %+v", rec)
	}
	// Kept alive again: well past the TTL the slot is still ours.
	select {
	case err := <-bHeld:
		t.Fatalf("waiter got the slot while the holder was back: %v", err)
	case <-time.After(4 * time.Second):
	}
	if err := a2.Fenced(ctx, clientv3.OpPut("/update-agent/workers/note", "x")); err != nil {
		t.Errorf("fenced write by the re-adopted holder: %v", err)
	}
	if err := a2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-bHeld; err != nil {
		t.Fatal(err)
	}
	pend, _, err := a2.Pending(ctx)
	if err != nil || len(pend) != 0 {
		t.Errorf("announcements after release: %v, %v", pend, err)
	}
}

// TestExpiredLeaseFreesSlot: the holder is cut off from etcd (its link
// dropped, its process still running and still believing it holds) for
// longer than the budget; the waiter gets the slot, and the cut-off holder,
// once it can talk to etcd again, cannot fence: neither Fence nor a fenced
// write passes. A late Adopt by a new process finds nothing and says so
// loudly.
func TestExpiredLeaseFreesSlot(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 30*time.Second)
	link := f.c.NewLink(t, 0)
	dir := t.TempDir()
	o := f.opts("a", 1, time.Second, dir)
	a, err := lock.New(f.c.Client(t, nil, link.URL()), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Fence(ctx); err != nil {
		t.Fatalf("Fence while holding: %v", err)
	}
	link.Drop()
	b := f.lock(f.opts("b", 1, 30*time.Second, ""))
	start := time.Now()
	if _, err := b.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("waiter got the slot after %v, before the 1s lease could expire", d)
	}
	if err := a.Fence(ctx); err == nil {
		t.Error("Fence passed while cut off from etcd")
	}
	link.Restore()
	// Until the client has reconnected Fence cannot tell (an error, never
	// nil); then it must say the slot is lost.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := a.Fence(ctx)
		if err == nil {
			t.Fatal("Fence passed after the slot went to another node")
		}
		if errors.Is(err, lock.ErrLeaseExpired) || errors.Is(err, lock.ErrNotHolder) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fence after the link came back: %v, want ErrLeaseExpired or ErrNotHolder", err)
		}
	}
	if err := a.Fenced(ctx, clientv3.OpPut("/x", "y")); !errors.Is(err, lock.ErrNotHolder) {
		t.Errorf("fenced write after expiry: %v, want ErrNotHolder", err)
	}
	if err := b.Fence(ctx); err != nil {
		t.Errorf("the new holder cannot fence: %v", err)
	}
	a2 := f.lock(o)
	_, _, found, err := a2.Adopt(ctx)
	if err != nil || found {
		t.Fatalf("Adopt after expiry: found=%v err=%v; want not found", found, err)
	}
	if !strings.Contains(f.buf.String(), "NODE LEASE EXPIRED") {
		t.Errorf("expiry not logged loudly; log:\n%s", f.buf.String())
	}
}

// TestOperatorRelease: `lock release` frees the slot; the old holder's
// fenced writes are refused from then on.
func TestOperatorRelease(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 20*time.Second)
	a := f.lock(f.opts("a", 1, 30*time.Second, ""))
	if _, err := a.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	b := f.lock(f.opts("b", 1, 30*time.Second, ""))
	bHeld := make(chan error, 1)
	go func() { _, err := b.Acquire(ctx, "c1", nil); bHeld <- err }()
	ok, err := lock.ReleaseNode(ctx, f.cli, "/update-agent", "workers", "a")
	if err != nil || !ok {
		t.Fatalf("ReleaseNode = %v, %v", ok, err)
	}
	if err := <-bHeld; err != nil {
		t.Fatal(err)
	}
	if err := a.Fenced(ctx, clientv3.OpPut("/x", "y")); !errors.Is(err, lock.ErrNotHolder) {
		t.Errorf("fenced write after operator release: %v, want ErrNotHolder", err)
	}
	if ok, err := lock.ReleaseNode(ctx, f.cli, "/update-agent", "workers", "nobody"); ok || err != nil {
		t.Errorf("releasing an unknown node = %v, %v; want false, nil", ok, err)
	}
}

// TestWaiterLeavesQueue: a waiter that releases (its update was withdrawn)
// leaves the queue without touching the holder, and the next waiter moves up.
func TestWaiterLeavesQueue(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 20*time.Second)
	a := f.lock(f.opts("a", 1, 30*time.Second, ""))
	if _, err := a.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	b := f.lock(f.opts("b", 1, 30*time.Second, ""))
	c := f.lock(f.opts("c", 1, 30*time.Second, ""))
	bctx, bcancel := context.WithCancel(ctx)
	bQueued := make(chan struct{})
	bDone := make(chan error, 1)
	go func() {
		_, err := b.Acquire(bctx, "c1", func(lock.Position) { close(bQueued) })
		bDone <- err
	}()
	<-bQueued
	positions := make(chan lock.Position, 4)
	cDone := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "c1", func(p lock.Position) { positions <- p })
		cDone <- err
	}()
	if p := <-positions; p.Ahead != 1 {
		t.Fatalf("c queued with %d ahead, want 1", p.Ahead)
	}
	bcancel()
	<-bDone
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if p := <-positions; p.Holder || p.Ahead != 0 {
		t.Errorf("after b left, c is at %+v; want first waiter", p)
	}
	if err := a.Fenced(ctx, clientv3.OpPut("/update-agent/workers/note", "x")); err != nil {
		t.Errorf("holder lost its slot when a waiter left: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cDone; err != nil {
		t.Fatal(err)
	}
}

// TestWaiterDequeuedByOperator: `lock release` of a waiter ends its wait with
// ErrDequeued (its own deletion is the one event it cannot count), and the
// waiter behind it moves up past it.
func TestWaiterDequeuedByOperator(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 20*time.Second)
	a := f.lock(f.opts("a", 1, 30*time.Second, ""))
	if _, err := a.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	b := f.lock(f.opts("b", 1, 30*time.Second, ""))
	bQueued := make(chan struct{})
	bDone := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, "c1", func(lock.Position) { close(bQueued) })
		bDone <- err
	}()
	<-bQueued
	c := f.lock(f.opts("c", 1, 30*time.Second, ""))
	positions := make(chan lock.Position, 4)
	cDone := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "c1", func(p lock.Position) { positions <- p })
		cDone <- err
	}()
	if p := <-positions; p.Ahead != 1 {
		t.Fatalf("c queued with %d ahead, want 1", p.Ahead)
	}
	if ok, err := lock.ReleaseNode(ctx, f.cli, "/update-agent", "workers", "b"); !ok || err != nil {
		t.Fatalf("ReleaseNode(b) = %v, %v", ok, err)
	}
	if err := <-bDone; !errors.Is(err, lock.ErrDequeued) {
		t.Errorf("b's Acquire after its entry was released: %v, want ErrDequeued", err)
	}
	if p := <-positions; p.Holder || p.Ahead != 0 {
		t.Errorf("after b was released, c is at %+v; want first waiter", p)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cDone; err != nil {
		t.Fatal(err)
	}
}

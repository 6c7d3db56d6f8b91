package fleetlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/fleetlock"
)

// TestMaxHoldExpiry: a client that never reports steady-state loses its
// slot when its hold timer (an etcd lease of max_hold) runs out, at the
// next tending or at its own next pre-reboot (which then queues it afresh,
// behind those waiting). The test waits for etcd to expire the leases.
func TestMaxHoldExpiry(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, time.Minute)
	o := f.opts(1)
	o.MaxHold, o.QueueHold = 4*time.Second, 3*time.Hour
	s, hs := f.server(o)
	pre := fleetlock.PathPreReboot

	if a := post(t, hs.URL, pre, "a", "default"); !a.ok() {
		t.Fatal(a)
	}
	if a := post(t, hs.URL, pre, "b", "default"); a.ok() {
		t.Fatal("b got the slot a holds")
	}
	if err := s.TendOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if h, _ := f.queue(ctx, 1); !slices.Equal(names(h), []string{"fleetlock:a"}) {
		t.Fatalf("a lost its slot right after the grant: holders %v", names(h))
	}
	// a asks again until its hold ran out: then it is not recursive any
	// more and queues behind b.
	for {
		a := post(t, hs.URL, pre, "a", "default")
		if !a.ok() {
			if a.Kind != "failed_lock_semaphore_full" {
				t.Fatalf("a past max_hold: %+v, want to queue behind b", a)
			}
			break
		}
		sleep(ctx, t, 200*time.Millisecond)
	}
	h, w := f.queue(ctx, 1)
	if !slices.Equal(names(h), []string{"fleetlock:b"}) || !slices.Equal(names(w), []string{"fleetlock:a"}) {
		t.Fatalf("holders %v waiters %v, want b then a", names(h), names(w))
	}
	if a := post(t, hs.URL, pre, "b", "default"); !a.ok() {
		t.Fatal(a)
	}
	// The tending expires a silent holder.
	for {
		if err := s.TendOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if h, _ := f.queue(ctx, 1); slices.Equal(names(h), []string{"fleetlock:a"}) {
			break
		}
		sleep(ctx, t, 200*time.Millisecond)
	}
}

// TestWaiterExpiry: a waiter that stops asking leaves the queue when its
// wait timer (an etcd lease of QueueHold, restarted by each request) runs
// out, so an agent behind it is not blocked for ever; one that keeps
// asking keeps its place.
func TestWaiterExpiry(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, time.Minute)
	o := f.opts(1)
	o.QueueHold = 5 * time.Second
	s, hs := f.server(o)
	pre := fleetlock.PathPreReboot

	holder := f.lock("holder", 1)
	if _, err := holder.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gone", "asking"} {
		if a := post(t, hs.URL, pre, id, "default"); a.ok() {
			t.Fatalf("%s got a slot the agent holds", id)
		}
	}
	agent := f.lock("agent", 1)
	acquired := make(chan error, 1)
	go func() {
		_, err := agent.Acquire(ctx, "c1", nil)
		acquired <- err
	}()
	waitQueued(t, f, ctx, 4)
	for {
		if a := post(t, hs.URL, pre, "asking", "default"); a.ok() {
			t.Fatal("asking got a slot the agent holds")
		}
		if err := s.TendOnce(ctx); err != nil {
			t.Fatal(err)
		}
		_, w := f.queue(ctx, 1)
		if !slices.Contains(names(w), "fleetlock:asking") {
			t.Fatalf("waiters %v: the client that keeps asking lost its place", names(w))
		}
		if slices.Equal(names(w), []string{"fleetlock:asking", "agent"}) {
			break // the silent client is gone
		}
		sleep(ctx, t, 500*time.Millisecond)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if a := post(t, hs.URL, pre, "asking", "default"); !a.ok() {
		t.Fatalf("asking after the agent released: %+v", a)
	}
	if a := post(t, hs.URL, fleetlock.PathSteadyState, "asking", "default"); !a.ok() {
		t.Fatal(a)
	}
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
	agent.Release(ctx)
}

// TestClocksApart: two servers whose clocks are hours apart serve one
// etcd. The server ahead neither revokes the slot the other granted (the
// holder is rebooting, silent) nor drops the other's waiter, by tending or
// by answering: the hold and the wait are timed by etcd's leases.
func TestClocksApart(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 30*time.Second)
	o := f.opts(1)
	oa := o
	oa.Clock = f.clock
	a, hsA := f.server(oa)
	ob := o
	ahead := clockwork.NewFakeClockAt(f.clock.Now().Add(5 * time.Hour))
	ob.Clock = ahead
	b, hsB := f.server(ob)
	pre, steady := fleetlock.PathPreReboot, fleetlock.PathSteadyState

	if r := postFrom(t, "127.0.0.2", hsA.URL, pre, "worker-1", "default"); !r.ok() {
		t.Fatal(r)
	}
	if r := postFrom(t, "127.0.0.3", hsA.URL, pre, "worker-2", "default"); r.ok() {
		t.Fatal("worker-2 got worker-1's slot")
	}
	check := func(when string) {
		t.Helper()
		h, w := f.queue(ctx, 1)
		if !slices.Equal(names(h), []string{"fleetlock:worker-1"}) || !slices.Equal(names(w), []string{"fleetlock:worker-2"}) {
			t.Fatalf("%s: holders %v waiters %v, want worker-1 holding, worker-2 waiting", when, names(h), names(w))
		}
	}
	for _, s := range []*fleetlock.Server{b, a, b} {
		if err := s.TendOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("after the server 5h ahead tended")
	if r := postFrom(t, "127.0.0.3", hsB.URL, pre, "worker-2", "default"); r.Kind != "failed_lock_semaphore_full" {
		t.Fatalf("worker-2 at the server ahead: %+v", r)
	}
	check("after worker-2 asked the server ahead")
	if r := postFrom(t, "127.0.0.2", hsB.URL, pre, "worker-1", "default"); !r.ok() {
		t.Fatalf("worker-1's recursive pre-reboot at the server ahead: %+v", r)
	}
	check("after worker-1 asked the server ahead")
	// The server behind, 5h later by the other's clock, still agrees.
	f.clock.Advance(time.Hour)
	if err := a.TendOnce(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the server behind tended")
	if r := postFrom(t, "127.0.0.2", hsB.URL, steady, "worker-1", "default"); !r.ok() {
		t.Fatal(r)
	}
	if r := postFrom(t, "127.0.0.3", hsA.URL, pre, "worker-2", "default"); !r.ok() {
		t.Fatalf("worker-2 after worker-1's steady-state: %+v", r)
	}
}

// waitQueued waits until n entries are queued (an agent queues from its
// own goroutine).
func waitQueued(t *testing.T, f *fixture, ctx context.Context, n int) {
	t.Helper()
	for {
		h, w := f.queue(ctx, 1)
		if len(h)+len(w) >= n {
			return
		}
		sleep(ctx, t, 5*time.Millisecond)
	}
}

// sleep polls: it fails the test when ctx ends first.
func sleep(ctx context.Context, t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatal("gave up waiting")
	case <-time.After(d):
	}
}

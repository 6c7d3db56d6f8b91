package fleetlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/fleetlock"
)

// TestMaxHoldExpiry: a client that never reports steady-state loses its
// slot max_hold after the grant, at the next tending or at its own next
// pre-reboot (which then queues it afresh, behind those waiting).
func TestMaxHoldExpiry(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 20*time.Second)
	o := f.opts(1)
	o.MaxHold, o.QueueHold = time.Hour, 3*time.Hour
	s, hs := f.server(o)
	pre := fleetlock.PathPreReboot

	if a := post(t, hs.URL, pre, "a", "default"); !a.ok() {
		t.Fatal(a)
	}
	if a := post(t, hs.URL, pre, "b", "default"); a.ok() {
		t.Fatal("b got the slot a holds")
	}
	f.clock.Advance(time.Hour - time.Second)
	if err := s.TendOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if h, _ := f.queue(ctx, 1); !slices.Equal(names(h), []string{"fleetlock:a"}) {
		t.Fatalf("a lost its slot before max_hold: holders %v", names(h))
	}
	f.clock.Advance(time.Second)
	// a asks again past its max_hold: not recursive any more.
	if a := post(t, hs.URL, pre, "a", "default"); a.ok() || a.Kind != "failed_lock_semaphore_full" {
		t.Fatalf("a past max_hold: %+v, want to queue behind b", a)
	}
	h, w := f.queue(ctx, 1)
	if !slices.Equal(names(h), []string{"fleetlock:b"}) || !slices.Equal(names(w), []string{"fleetlock:a"}) {
		t.Fatalf("holders %v waiters %v, want b then a", names(h), names(w))
	}
	if a := post(t, hs.URL, pre, "b", "default"); !a.ok() {
		t.Fatal(a)
	}
	// The tending expires a silent holder.
	f.clock.Advance(time.Hour)
	if err := s.TendOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if h, _ := f.queue(ctx, 1); !slices.Equal(names(h), []string{"fleetlock:a"}) {
		t.Fatalf("after b's max_hold: holders %v, want a", names(h))
	}
}

// TestWaiterExpiry: a waiter that stops asking leaves the queue after
// QueueHold, so an agent behind it is not blocked for ever; one that keeps
// asking keeps its place.
func TestWaiterExpiry(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 20*time.Second)
	// The default QueueHold, 15 minutes, as the README says.
	s, hs := f.server(f.opts(1))
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
	for range 3 {
		f.clock.Advance(10 * time.Minute)
		if a := post(t, hs.URL, pre, "asking", "default"); a.ok() {
			t.Fatal("asking got a slot the agent holds")
		}
		if err := s.TendOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, w := f.queue(ctx, 1)
	if !slices.Equal(names(w), []string{"fleetlock:asking", "agent"}) {
		t.Fatalf("waiters %v, want the silent client gone, the asking one kept", names(w))
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

// waitQueued waits until n entries are queued (an agent queues from its
// own goroutine).
func waitQueued(t *testing.T, f *fixture, ctx context.Context, n int) {
	t.Helper()
	for {
		h, w := f.queue(ctx, 1)
		if len(h)+len(w) >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never %d queued", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

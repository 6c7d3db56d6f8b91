package fleetlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/fleetlock"
)

// TestServerRestart: holders live in etcd, so a server that stops (its
// node reboots) loses nothing: another server, or the same one started
// again, knows the holder, answers its pre-reboot as recursive, refuses
// others, and releases on its steady-state. Meanwhile its lease is kept
// alive by whichever server tends.
func TestServerRestart(t *testing.T) {
	f := newFixture(t, 3)
	ctx := ctxT(t, 30*time.Second)
	o := f.opts(1)
	o.TTL = 5 * time.Second
	o.Clock = clockwork.NewRealClock()
	o.Tick = time.Second
	first, hs1 := f.server(o)
	tctx, stopFirst := context.WithCancel(ctx)
	go first.Tend(tctx)
	if a := post(t, hs1.URL, fleetlock.PathPreReboot, "a", "default"); !a.ok() {
		t.Fatal(a)
	}
	// The first server goes away for good.
	hs1.Close()
	stopFirst()

	second, hs2 := f.server(o)
	go second.Tend(ctx)
	// Longer than the lease TTL: only the second server's tending keeps
	// a's lease alive.
	deadline := time.Now().Add(o.TTL + 2*time.Second)
	for time.Now().Before(deadline) {
		if h, _ := f.queue(ctx, 1); !slices.Equal(names(h), []string{"fleetlock:a"}) {
			t.Fatalf("holders %v after the first server stopped, want a", names(h))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if a := post(t, hs2.URL, fleetlock.PathPreReboot, "b", "default"); a.ok() {
		t.Fatal("b got a's slot from the second server")
	}
	if a := post(t, hs2.URL, fleetlock.PathPreReboot, "a", "default"); !a.ok() {
		t.Fatalf("a's recursive pre-reboot at the second server: %+v", a)
	}
	if a := post(t, hs2.URL, fleetlock.PathSteadyState, "a", "default"); !a.ok() {
		t.Fatal(a)
	}
	if a := post(t, hs2.URL, fleetlock.PathPreReboot, "b", "default"); !a.ok() {
		t.Fatalf("b after a released at the second server: %+v", a)
	}
}

package fleetlock_test

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/fleetlock"
)

// TestMixedNeverExceedsSlots: agents (real lock sessions) and FleetLock
// clients (zincati's requests through two servers) share 2 slots of one
// group on a 3-member etcd. At no time do more than 2 believe they may
// reboot, and every one of them gets its turn.
func TestMixedNeverExceedsSlots(t *testing.T) {
	f := newFixture(t, 3)
	const slots, agents, clients = 2, 8, 8
	ctx := ctxT(t, 60*time.Second)
	var servers []*httptest.Server
	for range 2 {
		_, hs := f.server(f.opts(slots))
		servers = append(servers, hs)
	}
	var inside, maxInside, served atomic.Int32
	enter := func() {
		n := inside.Add(1)
		for {
			m := maxInside.Load()
			if n <= m || maxInside.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Duration(1+rand.IntN(10)) * time.Millisecond)
		inside.Add(-1)
		served.Add(1)
	}
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() {
			l := f.lock(fmt.Sprintf("agent%d", i), slots)
			if _, err := l.Acquire(ctx, "c1", nil); err != nil {
				t.Error(err)
				return
			}
			enter()
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	for i := range clients {
		wg.Go(func() {
			id := fmt.Sprintf("worker%d", i)
			for n := 0; ; n++ {
				// zincati asks one server, then another: any may answer.
				a := post(t, servers[n%2].URL, fleetlock.PathPreReboot, id, "default")
				if a.ok() {
					break
				}
				if a.Kind != "failed_lock_semaphore_full" {
					t.Errorf("%s: %+v", id, a)
					return
				}
				select {
				case <-ctx.Done():
					t.Errorf("%s never got a slot", id)
					return
				case <-time.After(time.Duration(5+rand.IntN(10)) * time.Millisecond):
				}
			}
			enter()
			if a := post(t, servers[i%2].URL, fleetlock.PathSteadyState, id, "default"); !a.ok() {
				t.Errorf("%s steady-state: %+v", id, a)
			}
		})
	}
	wg.Wait()
	if m := maxInside.Load(); m > slots {
		t.Errorf("%d held at once, slots %d", m, slots)
	}
	if n := served.Load(); n != agents+clients {
		t.Errorf("served %d of %d", n, agents+clients)
	}
	t.Logf("served %d, max concurrent holders %d", served.Load(), maxInside.Load())
	if h, w := f.queue(ctx, slots); len(h)+len(w) != 0 {
		t.Errorf("queue not empty at the end: holders %v waiters %v", names(h), names(w))
	}
}

package fleetlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/agent/lock"
)

// TestMinIntervalSpacesFleetLockAndAgents: lock.min_interval holds in a
// group shared by zincati workers and agents. A worker's steady-state
// leaves the spacing marker in the transaction that frees its slot (the
// agent granted on that delete finds it); after an agent's release, a
// worker whose turn came is answered failed_lock_min_interval, saying how
// long is left, until min_interval after the release.
func TestMinIntervalSpacesFleetLockAndAgents(t *testing.T) {
	f := newFixture(t, 1)
	const interval = 3 * time.Second
	ctx := ctxT(t, time.Minute)
	o := f.opts(1)
	o.MinInterval = interval
	_, hs := f.server(o)
	agent := func(boot, dir string) *lock.Lock {
		l, err := lock.New(f.cli, lock.Options{Prefix: prefix, Group: "default", Slots: 1, TTL: 30 * time.Second,
			Node: "cp1", BootID: boot, MachineID: "machine-cp1", StateDir: dir, MinInterval: interval, Log: f.log})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	if a := post(t, hs.URL, fleetlock.PathPreReboot, "worker-1", "default"); !a.ok() {
		t.Fatalf("worker-1 pre-reboot: %+v", a)
	}
	dir := t.TempDir()
	cp1 := agent("boot-1", dir)
	queued := make(chan struct{}, 1)
	granted := make(chan error, 1)
	go func() {
		_, err := cp1.Acquire(ctx, "c1", func(p lock.Position) {
			if !p.Holder {
				select {
				case queued <- struct{}{}:
				default:
				}
			}
		})
		granted <- err
	}()
	<-queued
	steady := time.Now()
	if a := post(t, hs.URL, fleetlock.PathSteadyState, "worker-1", "default"); !a.ok() {
		t.Fatalf("worker-1 steady-state: %+v", a)
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	// (A test starved past min_interval rightly finds it expired.)
	if sp, err := lock.ReadSpacing(ctx, f.cli, prefix, "default"); err != nil ||
		(!sp.Active && time.Since(steady) < interval) || (sp.Active && sp.By != "fleetlock:worker-1") {
		t.Fatalf("cp1, granted on worker-1's release, finds no spacing marker: %+v %v", sp, err)
	}

	// cp1 reboots holding its slot, then releases it.
	cp1.Close()
	cp1 = agent("boot-2", dir)
	if _, pos, found, err := cp1.Adopt(ctx); err != nil || !found || !pos.Holder {
		t.Fatalf("cp1 after its reboot: %+v %v %v", pos, found, err)
	}
	if a := post(t, hs.URL, fleetlock.PathPreReboot, "worker-2", "default"); a.Kind != string(fleetlock.KindSemaphoreFull) {
		t.Fatalf("worker-2 while cp1 holds: %+v", a)
	}
	released := time.Now()
	if err := cp1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// granted asks as zincati does: granted less than min_interval after
	// the release is the failure (a test starved past it is rightly
	// granted at once).
	granted2 := func() bool {
		a := post(t, hs.URL, fleetlock.PathPreReboot, "worker-2", "default")
		since := time.Since(released)
		switch {
		case a.ok() && since < interval:
			t.Fatalf("worker-2 granted %v after cp1's release, min_interval %v", since.Round(time.Millisecond), interval)
		case a.ok():
		case a.Kind != string(fleetlock.KindMinInterval) || a.Status != 409 || !strings.Contains(a.Value, "cp1 released") ||
			!strings.Contains(a.Value, "next reboot of the group in") || ctx.Err() != nil:
			t.Fatalf("worker-2, %v after cp1's release: %+v", since.Round(time.Millisecond), a)
		}
		return a.ok()
	}
	if granted2() {
		return
	}
	holders, _ := f.queue(ctx, 1)
	if len(holders) != 1 || holders[0].Node != "fleetlock:worker-2" || !holders[0].AcquiredAt.IsZero() {
		t.Fatalf("worker-2 keeps the slot, not granted: %+v", holders)
	}
	// zincati asks again; etcd expires the marker (poll, bounded).
	for !granted2() {
		time.Sleep(100 * time.Millisecond)
	}
}

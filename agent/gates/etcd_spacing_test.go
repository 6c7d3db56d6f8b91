package gates_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

const (
	spacingPrefix   = "/update-agent/lock"
	spacingGroup    = "cp"
	spacingInterval = 3 * time.Second
	spacingTarget   = "0123456789abcdef0123"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// agentLock is the engine's lock port as the daemon wires it (agent/adapters
// over agent/lock), for node booted as boot.
func agentLock(cli *clientv3.Client, node, boot, stateDir string) *adapters.Lock {
	return &adapters.Lock{Node: node, Make: func(context.Context) (*lock.Lock, error) {
		return lock.New(cli, lock.Options{Prefix: spacingPrefix, Group: spacingGroup, Slots: 1, TTL: 10 * time.Second,
			Node: node, BootID: boot, MachineID: "machine-" + node, StateDir: stateDir,
			MinInterval: spacingInterval, Log: quiet})
	}}
}

// agentGates is the engine's gates port as the daemon wires it.
func agentGates(cli *clientv3.Client, node string) adapters.Gates {
	return adapters.Gates{Node: node, Log: quiet, C: &gates.Checker{Etcd: cli, LockPrefix: spacingPrefix,
		Group: spacingGroup, MinInterval: spacingInterval}}
}

// holdThroughReboot has node take the slot, stop for its reboot (the lock
// kept), and returns its lock port after the reboot.
func holdThroughReboot(t *testing.T, ctx context.Context, cli *clientv3.Client, node string) *adapters.Lock {
	dir := t.TempDir()
	before := agentLock(cli, node, "boot-1", dir)
	if _, err := before.Acquire(ctx, spacingTarget); err != nil {
		t.Fatal(err)
	}
	before.Close()
	after := agentLock(cli, node, "boot-2", dir)
	if ls, err := after.Adopt(ctx); err != nil || ls != engine.LeaseHolding {
		t.Fatalf("%s after its reboot: %v %v", node, ls, err)
	}
	return after
}

// TestSpacingCountsFromTheRelease: cp1 releases its slot after its reboot
// while cp2 waits for it. cp2 is granted on the delete of cp1's key and
// checks its gates at once, as its engine does, before cp1's engine got
// to record the release (Gates.Rebooted): the spacing gate already holds,
// and it lets cp2 go no sooner than min_interval after the release.
func TestSpacingCountsFromTheRelease(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cp1 := holdThroughReboot(t, ctx, cli, "cp1")
	queued := make(chan struct{})
	var once sync.Once
	cp2 := agentLock(cli, "cp2", "boot-1", t.TempDir())
	cp2.OnPosition = func(p lock.Position) {
		if !p.Holder {
			once.Do(func() { close(queued) })
		}
	}
	granted := make(chan error, 1)
	go func() { _, err := cp2.Acquire(ctx, spacingTarget); granted <- err }()
	<-queued

	released := time.Now()
	if err := cp1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	g2 := agentGates(cli, "cp2")
	// gateOpen checks cp2's gates: open less than min_interval after the
	// release is the failure. (A test starved past min_interval sees it
	// open, rightly.)
	gateOpen := func() bool {
		hold, why := g2.Hold(ctx)
		if since := time.Since(released); !hold && since < spacingInterval {
			t.Fatalf("cp2 passed the spacing gate %v after cp1's release, min_interval %v", since.Round(time.Millisecond), spacingInterval)
		} else if hold && ctx.Err() != nil {
			t.Fatalf("spacing gate never opened: %s", why)
		}
		return !hold
	}
	if gateOpen() {
		return
	}
	before, err := cli.Get(ctx, gates.SpacingKey(spacingPrefix, spacingGroup))
	if err != nil || len(before.Kvs) != 1 || string(before.Kvs[0].Value) != "cp1" {
		t.Fatalf("spacing marker after cp1's release: %v %v", before, err)
	}
	// cp1's engine records the release after it: the marker the release
	// wrote stands as it is.
	if err := agentGates(cli, "cp1").Rebooted(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := cli.Get(ctx, gates.SpacingKey(spacingPrefix, spacingGroup))
	if err != nil || (len(after.Kvs) == 1 && after.Kvs[0].ModRevision != before.Kvs[0].ModRevision) ||
		(len(after.Kvs) == 0 && time.Since(released) < spacingInterval) {
		t.Fatalf("Gates.Rebooted rewrote the release's marker: %v -> %v %v", before.Kvs, after, err)
	}
	// etcd expires the marker: poll, bounded, for the gate to open.
	for !gateOpen() {
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSpacingMarkerSurvivesACutRelease: cp1's connection to etcd drops
// right after the delete of its holder key is committed (a crash there does
// the same: the engine never gets to Gates.Rebooted). The marker is there
// all the same.
func TestSpacingMarkerSurvivesACutRelease(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	link := c.NewLink(t, 0)
	cli, cliCP1 := c.Client(t, nil), c.Client(t, nil, link.URL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cp1 := holdThroughReboot(t, ctx, cliCP1, "cp1")
	key := lock.HoldersPrefix(spacingPrefix, spacingGroup) + "cp1"
	cur, err := cli.Get(ctx, key)
	if err != nil || len(cur.Kvs) != 1 {
		t.Fatalf("cp1 holds no key: %v %v", cur, err)
	}
	wch := cli.Watch(ctx, key, clientv3.WithRev(cur.Header.Revision+1), clientv3.WithFilterPut())
	cut := make(chan int64, 1) // the delete's revision
	go func() {
		for wr := range wch {
			if len(wr.Events) > 0 {
				link.Drop()
				cut <- wr.Events[0].Kv.ModRevision
				return
			}
		}
	}()
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	released := make(chan struct{})
	go func() {
		defer close(released)
		cp1.Release(rctx) // cut short; its error does not matter
	}()
	defer func() { <-released }()
	var rev int64
	select {
	case rev = <-cut:
	case <-ctx.Done():
		t.Fatal("cp1's key was never deleted")
	}
	// The marker as of the delete's own revision: whatever the timing, no
	// waiter granted on the delete can read a state without it.
	m, err := cli.Get(ctx, gates.SpacingKey(spacingPrefix, spacingGroup), clientv3.WithRev(rev))
	if err != nil || len(m.Kvs) != 1 || string(m.Kvs[0].Value) != "cp1" || m.Kvs[0].ModRevision != rev {
		t.Fatalf("spacing marker at the revision of cp1's delete (%d), its release cut right after: %v %v", rev, m, err)
	}
}

package adapters

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// finalizeWatch is a memberHost whose finalize is observed as it happens.
type finalizeWatch struct {
	*memberHost
	onFinalize func()
}

func (h finalizeWatch) Finalize(ctx context.Context, c string) error {
	h.onFinalize()
	return h.memberHost.Finalize(ctx, c)
}

// promoteHooks promotes the node to an etcd member when its pre-reboot
// hooks first run: it holds its group's slot then, taken as a worker.
type promoteHooks struct{ promote func() }

func (p promoteHooks) Run(context.Context) error { p.promote(); return nil }

// TestPromotedWorkerWaitsForMemberDown: two running agents, the engines
// with the real lock adapter over a real etcd, in two groups. Member m's
// node takes its slots and finalizes: its member is down until it comes
// back in a new boot. Node p started as a worker; it takes its group's
// slot, and while its hooks run it becomes an etcd member's host (its
// member lookup now names the member). It must not finalize while m is
// down: it queues for the member slot and reboots only after m released.
func TestPromotedWorkerWaitsForMemberDown(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var pMember atomic.Value
	pMember.Store("")
	var mDown, violated atomic.Bool
	type agent struct {
		eng  *engine.Engine
		stop context.CancelFunc
		done chan error
		lk   *Lock
	}
	start := func(node, group string, boot int, stateDir string, member func() string, host engine.OS, stager engine.Stager, hooks engine.Hooks) *agent {
		cli := c.Client(t, nil)
		lk := &Lock{Node: node, Make: func(context.Context) (*lock.Lock, error) {
			return lock.New(cli, lock.Options{Prefix: "/ua", Group: group, Slots: 1, TTL: 30 * time.Second, Node: node,
				MachineID: "m-" + node, StateDir: stateDir, Log: slog.New(slog.DiscardHandler),
				LocalMember: func(context.Context) (string, error) { return member(), nil }})
		}}
		b := fmt.Sprintf("boot-%s-%d", node, boot)
		eng := engine.New(engine.Options{OS: host, Stager: stager, Lock: lk, Cluster: engine.NoCluster{}, Hooks: hooks,
			Store: state.Store{Dir: stateDir}, BootID: func() (string, error) { return b, nil },
			Policy: engine.Policy{CheckInterval: time.Hour, MaxFailures: 3, Retry: engine.Backoff{Base: time.Second, Max: time.Second},
				RequireSafe: true, RecheckInterval: 100 * time.Millisecond, RebootTimeout: time.Minute},
			Log: slog.New(slog.DiscardHandler), BeatInterval: time.Second})
		ectx, stop := context.WithCancel(ctx)
		a := &agent{eng: eng, stop: stop, done: make(chan error, 1), lk: lk}
		go func() { a.done <- eng.Run(ectx) }()
		return a
	}
	halt := func(a *agent) { a.stop(); <-a.done; a.lk.Close() }

	// m goes down holding its slots.
	mHost := &memberHost{booted: "old", reboot: make(chan struct{}, 1)}
	mDir := t.TempDir()
	mName := func() string { return c.Members[0].Name }
	m := start("m", "g0", 0, mDir, mName, finalizeWatch{mHost, func() { mDown.Store(true) }}, mHost, engine.NoHooks{})
	select {
	case <-mHost.reboot:
	case <-ctx.Done():
		t.Fatal("m never finalized")
	}
	halt(m)

	// p, a worker when its agent started, promoted while holding its
	// group's slot.
	pHost := &memberHost{booted: "old", reboot: make(chan struct{}, 1)}
	p := start("p", "g1", 0, t.TempDir(), func() string { return pMember.Load().(string) },
		finalizeWatch{pHost, func() { violated.Store(mDown.Load()) }}, pHost,
		promoteHooks{func() { pMember.Store(c.Members[1].Name) }})
	defer halt(p)
	for waiting := false; !waiting; {
		st, err := lock.Status(ctx, c.Client(t, nil), "/ua", 1, lock.MembersGroup, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range st {
			for _, w := range g.Waiters {
				waiting = waiting || w.Node == "p"
			}
		}
		select {
		case <-pHost.reboot:
			t.Fatalf("the promoted node finalized while member m was down (violated=%v)", violated.Load())
		case <-ctx.Done():
			t.Fatalf("the promoted node never queued for the member slot; snapshot %+v", p.eng.Snapshot())
		case <-time.After(20 * time.Millisecond):
		}
	}

	// m comes back in a new boot and releases; then p may go.
	mHost.mu.Lock()
	mHost.booted, mHost.staged = "new", false
	mHost.mu.Unlock()
	mDown.Store(false)
	m = start("m", "g0", 1, mDir, mName, mHost, mHost, engine.NoHooks{})
	defer halt(m)
	select {
	case <-pHost.reboot:
	case <-ctx.Done():
		t.Fatalf("the promoted node never finalized after m released; snapshot %+v", p.eng.Snapshot())
	}
	if violated.Load() {
		t.Error("the promoted node finalized while member m was down")
	}
}

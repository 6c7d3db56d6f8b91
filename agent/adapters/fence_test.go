package adapters

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// fakeHost is a fake rpm-ostree and stager at the engine's unit boundary: it
// stages the one target offered and counts finalizes.
type fakeHost struct {
	mu        sync.Mutex
	staged    bool
	finalizes int
}

func (h *fakeHost) Status(context.Context) (engine.OSStatus, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := engine.OSStatus{Booted: engine.Deployment{Checksum: "old"}}
	if h.staged {
		st.Staged = &engine.Deployment{Checksum: "new"}
	}
	return st, nil
}
func (h *fakeHost) Check(context.Context) (*state.Target, error) {
	return &state.Target{Checksum: "new"}, nil
}
func (h *fakeHost) Finalize(context.Context, string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finalizes++
	return nil
}
func (h *fakeHost) Cleanup(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.staged = false
	return nil
}
func (h *fakeHost) Stage(context.Context, state.Target) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.staged = true
	return nil
}
func (h *fakeHost) Recover(context.Context) error { return nil }

// partition is the etcd member check at the engine's unit boundary: the
// first check once armed says is where the test cuts the node off.
type partition struct {
	engine.NoCluster
	armed func() bool
	cut   func()
	mu    sync.Mutex
	done  bool
}

func (p *partition) SafeToReboot(ctx context.Context) (bool, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed() && !p.done {
		p.done = true
		p.cut()
	}
	return true, "", nil
}

// flagHooks are the pre-reboot hooks; they record that they ran.
type flagHooks struct{ ran *atomic.Bool }

func (f flagHooks) Run(context.Context) error { f.ran.Store(true); return nil }

// noticeHost is the host port; it records that the people on the host
// were told, the step right before the last checks.
type noticeHost struct {
	engine.NoHost
	told *atomic.Bool
}

func (h noticeHost) Announce(context.Context, string) error { h.told.Store(true); return nil }

// TestCutOffHolderNeverFinalizes: the engine, with the real lock adapter
// over a real etcd, holds the slot and passes its checks after the hooks;
// right then its link to etcd drops for longer than the reboot budget, its
// lease expires and another node takes the slot. When the link comes back
// the node must not finalize: the next precheck's Adopt finds the slot
// lost.
func TestCutOffHolderNeverFinalizes(t *testing.T) {
	cutOffHolder(t, func(hooksRan, _ *atomic.Bool) bool { return hooksRan.Load() })
}

// TestCutInLastPrecheckOnlyFenceStops: the same cut, inside the last
// precheck before the fence (after its Adopt, once the people on the host
// were told): nothing but the fence stands between the lost slot and
// finalize-deployment, so this fails with a Fence that proves nothing.
func TestCutInLastPrecheckOnlyFenceStops(t *testing.T) {
	cutOffHolder(t, func(_, told *atomic.Bool) bool { return told.Load() })
}

// cutOffHolder runs one node's engine until its link to etcd is cut at the
// first SafeToReboot after armed says so, and checks it never finalizes.
func cutOffHolder(t *testing.T, armed func(hooksRan, told *atomic.Bool) bool) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	link := c.NewLink(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mk := func(node, machine string, ttl time.Duration, endpoints ...string) *lock.Lock {
		l, err := lock.New(c.Client(t, nil, endpoints...), lock.Options{Prefix: "/ua", Group: "g", Slots: 1, TTL: ttl,
			Node: node, MachineID: machine, StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	other := mk("b", "mb", 30*time.Second)
	otherHeld := make(chan error, 1)
	var ran, told atomic.Bool
	cl := &partition{armed: func() bool { return armed(&ran, &told) }, cut: func() {
		link.Drop()
		_, err := other.Acquire(ctx, "new", nil)
		otherHeld <- err
		link.Restore()
	}}
	h := &fakeHost{}
	a := mk("a", "ma", time.Second, link.URL())
	lk := &Lock{Node: "a", Make: func(context.Context) (*lock.Lock, error) { return a, nil }}
	eng := engine.New(engine.Options{OS: h, Stager: h, Lock: lk, Cluster: cl, Hooks: flagHooks{&ran}, Host: noticeHost{told: &told},
		Store: state.Store{Dir: t.TempDir()}, BootID: func() (string, error) { return "b1", nil },
		Policy: engine.Policy{CheckInterval: time.Hour, RequireSafe: true, MaxFailures: 3,
			Retry: engine.Backoff{Base: time.Second, Max: time.Second}, RecheckInterval: 100 * time.Millisecond},
		Log: slog.New(slog.DiscardHandler), BeatInterval: time.Second})
	ectx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(ectx) }()
	defer func() { stop(); <-done }()
	select {
	case err := <-otherHeld:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the other node never got the slot")
	}
	finalizes := func() int { h.mu.Lock(); defer h.mu.Unlock(); return h.finalizes }
	for !strings.Contains(eng.Snapshot().State.LastError, "slot was lost before finalizing") {
		if n := finalizes(); n != 0 {
			t.Fatalf("the node finalized %d time(s) after its slot went to another node", n)
		}
		if ctx.Err() != nil {
			t.Fatalf("the cut-off node never noticed; snapshot %+v", eng.Snapshot())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := finalizes(); n != 0 {
		t.Errorf("the node finalized %d time(s) after its slot went to another node", n)
	}
}

package adapters

import (
	"context"
	"log/slog"
	"strings"
	"sync"
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

// partition is the etcd member check at the engine's unit boundary; the
// last check before finalizing is where the test cuts the node off.
type partition struct {
	engine.NoCluster
	hooksRan *bool
	cut      func()
	mu       sync.Mutex
	done     bool
}

func (p *partition) SafeToReboot(ctx context.Context) (bool, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if *p.hooksRan && !p.done {
		p.done = true
		p.cut()
	}
	return true, "", nil
}

type flagHooks struct{ ran *bool }

func (f flagHooks) Run(context.Context) error { *f.ran = true; return nil }

// TestCutOffHolderNeverFinalizes: the engine, with the real lock adapter
// over a real etcd, holds the slot and passes its last checks; right then
// its link to etcd drops for longer than the reboot budget, its lease
// expires and another node takes the slot. When the link comes back the
// node must not finalize: the fence finds the slot lost.
func TestCutOffHolderNeverFinalizes(t *testing.T) {
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
	var ran bool
	cl := &partition{hooksRan: &ran, cut: func() {
		link.Drop()
		_, err := other.Acquire(ctx, "new", nil)
		otherHeld <- err
		link.Restore()
	}}
	h := &fakeHost{}
	a := mk("a", "ma", time.Second, link.URL())
	lk := &Lock{Node: "a", Make: func(context.Context) (*lock.Lock, error) { return a, nil }}
	eng := engine.New(engine.Options{OS: h, Stager: h, Lock: lk, Cluster: cl, Hooks: flagHooks{&ran},
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

package adapters

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/lock"
)

// Lock is engine.Lock over agent/lock. agent/lock keys entries by node and
// keeps its own lease record, which is what makes Acquire idempotent.
type Lock struct {
	// Make builds the lock on first use: it needs the local etcd member's
	// name, and etcd may not be up yet when the agent starts.
	Make func(ctx context.Context) (*lock.Lock, error)
	Node string
	// OnPosition, when set, is told where the node stands while it waits
	// (systemd's status line); Position keeps the last one either way.
	OnPosition func(lock.Position)

	mu  sync.Mutex
	l   *lock.Lock
	pos *engine.QueuePosition
}

// Position is where the node stood when it last waited for a slot
// (engine.PositionReporter), nil before it queued.
func (a *Lock) Position() *engine.QueuePosition {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pos
}

func (a *Lock) onPosition(p lock.Position) {
	a.mu.Lock()
	a.pos = &engine.QueuePosition{Holder: p.Holder, Index: p.Index, Ahead: p.Ahead, Queued: p.Queued, Slots: p.Slots}
	a.mu.Unlock()
	if a.OnPosition != nil {
		a.OnPosition(p)
	}
}

// Get returns the lock, building it on first use.
func (a *Lock) Get(ctx context.Context) (*lock.Lock, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.l != nil {
		return a.l, nil
	}
	l, err := a.Make(ctx)
	if err != nil {
		return nil, fmt.Errorf("setting up the reboot lock: %w", err)
	}
	a.l = l
	return l, nil
}

// Close stops keeping the node lease alive but keeps the slot (the agent
// stops for a reboot or a restart and will adopt it again).
func (a *Lock) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.l != nil {
		a.l.Close()
	}
}

// Acquire queues and waits for a slot.
func (a *Lock) Acquire(ctx context.Context, target string) (int64, error) {
	l, err := a.Get(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := l.Acquire(ctx, target, a.onPosition); err != nil {
		return 0, err
	}
	id, err := l.LeaseID()
	if err != nil {
		return 0, nil // held; the ID is only for the record
	}
	return int64(id), nil
}

// Adopt re-attaches the node's entry.
func (a *Lock) Adopt(ctx context.Context) (engine.LeaseState, error) {
	l, err := a.Get(ctx)
	if err != nil {
		return engine.LeaseGone, err
	}
	_, pos, found, err := l.Adopt(ctx)
	switch {
	case err != nil:
		return engine.LeaseGone, err
	case !found:
		return engine.LeaseGone, nil
	case pos.Holder:
		return engine.LeaseHolding, nil
	}
	return engine.LeaseWaiting, nil
}

// Release gives the slot (or the place in line) back. Adopt first: in a new
// process agent/lock only fences on a lease it has re-adopted, and revoking
// that lease is what removes a waiter's entry.
func (a *Lock) Release(ctx context.Context) error {
	l, err := a.Get(ctx)
	if err != nil {
		return err
	}
	if _, _, _, err := l.Adopt(ctx); err != nil {
		return err
	}
	return l.Release(ctx)
}

// Fence proves the slot is held right before finalizing.
func (a *Lock) Fence(ctx context.Context) error {
	l, err := a.Get(ctx)
	if err != nil {
		return err
	}
	err = l.Fence(ctx)
	if errors.Is(err, lock.ErrNotHolder) || errors.Is(err, lock.ErrLeaseExpired) {
		return fmt.Errorf("%w: %w", engine.ErrSlotLost, err)
	}
	return err
}

// Announce records the pending update.
func (a *Lock) Announce(ctx context.Context, target string) error {
	l, err := a.Get(ctx)
	if err != nil {
		return err
	}
	return l.Announce(ctx, target)
}

// Withdraw removes the announcement.
func (a *Lock) Withdraw(ctx context.Context) error {
	l, err := a.Get(ctx)
	if err != nil {
		return err
	}
	return l.Withdraw(ctx)
}

// pendingMembers are the etcd members of other nodes with an update
// pending: a leader lets those reboot first.
func (a *Lock) pendingMembers(ctx context.Context) ([]string, error) {
	l, err := a.Get(ctx)
	if err != nil {
		return nil, err
	}
	anns, _, err := l.Pending(ctx)
	if err != nil {
		return nil, err
	}
	var m []string
	for _, an := range anns {
		if an.Node != a.Node && an.Member != "" {
			m = append(m, an.Member)
		}
	}
	return m, nil
}

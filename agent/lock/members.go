package lock

import (
	"context"
	"fmt"
)

// MembersGroup is the cluster-wide semaphore of etcd members: one slot,
// whatever the groups and their slots. With lock.slots > 1, or the members
// of one cluster in different groups, two members could otherwise pass the
// quorum check together and go down together. Group names cannot start
// with '_' (config), so it never meets a configured group.
const MembersGroup = "_members"

// forget drops the member slot's fence (nil-safe: nodes without a member
// have no member slot).
func (l *Lock) forget() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.heldRev = 0
	l.mu.Unlock()
}

// Acquire queues this node for a slot of its group and blocks until it holds
// one; a node running an etcd member then also queues for the member slot
// and holds both before it returns. Every node takes its group's slot first
// and the member slot last, so no two nodes wait for each other.
// onPosition (may be nil) is told the group position whenever it changes,
// for STATUS lines. Calling Acquire again while queued or holding keeps the
// places.
func (l *Lock) Acquire(ctx context.Context, target string, onPosition func(Position)) (Position, error) {
	pos, err := l.acquireSlot(ctx, target, onPosition)
	if err != nil || l.members == nil {
		return pos, err
	}
	l.log.Info("waiting for the cluster-wide etcd member slot", "member", l.o.Member)
	if _, err := l.members.acquireSlot(ctx, target, nil); err != nil {
		return Position{}, fmt.Errorf("etcd member slot: %w", err)
	}
	return pos, nil
}

// Adopt picks up after a restart or reboot: it re-adopts the recorded node
// lease and reports this node's queue entry. found is false when there is
// none (never queued, released, or the lease expired while away: that case
// is logged loudly). A member's node holds only while it holds the member
// slot too; until then it is reported waiting.
func (l *Lock) Adopt(ctx context.Context) (rec Record, pos Position, found bool, err error) {
	rec, pos, found, err = l.adoptSlot(ctx)
	if err != nil || !found || l.members == nil {
		return rec, pos, found, err
	}
	_, mpos, mfound, err := l.members.adoptSlot(ctx)
	if err != nil {
		return Record{}, Position{}, false, fmt.Errorf("etcd member slot: %w", err)
	}
	if pos.Holder && (!mfound || !mpos.Holder) {
		pos.Holder = false
	}
	return rec, pos, found, nil
}

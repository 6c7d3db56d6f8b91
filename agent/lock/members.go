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

// TakesMemberSlot decides, from a fresh lookup of the local member, whether
// this node takes (or keeps) the member slot: while it runs an etcd member,
// whenever it became one; and, once it queued for the slot in this process,
// until it releases even if it stopped being one (removed from the cluster
// meanwhile): its reboot no longer touches quorum, and keeping the slot
// only makes another member wait a little, where dropping a held slot
// halfway would need a fenced delete for no safety gain.
func TakesMemberSlot(member string, queued bool) bool {
	return member != "" || queued
}

// refreshMember looks the local member up (Options.LocalMember) and sets
// the member slot up as TakesMemberSlot decides. It returns the member
// ("" for none) and the member slot's handle (nil when the node takes none).
func (l *Lock) refreshMember(ctx context.Context) (string, *Lock, error) {
	name := l.memberName()
	if l.o.LocalMember != nil {
		var err error
		if name, err = l.o.LocalMember(ctx); err != nil {
			return "", nil, fmt.Errorf("looking up the local etcd member: %w", err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	was, first := l.o.Member, !l.memberLooked
	l.memberLooked = true
	l.setMemberLocked(name)
	if name != was && !first { // the first lookup is logged by whoever found the member
		l.log.Warn("the local etcd member changed: the cluster-wide member slot follows",
			"member", name, "was", was, "member_slot", l.members != nil)
	}
	return name, l.members, nil
}

// setMember records the local member at New.
func (l *Lock) setMember(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setMemberLocked(name)
}

func (l *Lock) setMemberLocked(name string) {
	l.o.Member = name
	if !TakesMemberSlot(name, l.members != nil) {
		return
	}
	if l.members == nil {
		l.members = l.newMembers(name)
		return
	}
	if name != "" {
		l.members.mu.Lock()
		l.members.o.Member = name
		l.members.mu.Unlock()
	}
}

// memberName is the local member as last looked up ("" for none).
func (l *Lock) memberName() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.o.Member
}

// memberSlot is the member slot's handle, nil when the node takes none.
func (l *Lock) memberSlot() *Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.members
}

// dropMemberSlot forgets the member slot after a release when the node no
// longer runs a member: its next acquisition decides again.
func (l *Lock) dropMemberSlot() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.o.Member == "" {
		l.members = nil
	}
}

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
// and holds both before it returns. The local member is looked up first
// (Options.LocalMember), so a node that became a member since the agent
// started takes the member slot too. Every node takes its group's slot first
// and the member slot last, so no two nodes wait for each other.
// onPosition (may be nil) is told the group position whenever it changes,
// for STATUS lines. Calling Acquire again while queued or holding keeps the
// places.
func (l *Lock) Acquire(ctx context.Context, target string, onPosition func(Position)) (Position, error) {
	member, members, err := l.refreshMember(ctx)
	if err != nil {
		return Position{}, fmt.Errorf("acquiring reboot slot: %w", err)
	}
	pos, err := l.acquireSlot(ctx, target, onPosition)
	if err != nil || members == nil {
		return pos, err
	}
	l.log.Info("waiting for the cluster-wide etcd member slot", "member", member)
	if _, err := members.acquireSlot(ctx, target, nil); err != nil {
		return Position{}, fmt.Errorf("etcd member slot: %w", err)
	}
	return pos, nil
}

// Adopt picks up after a restart or reboot: it re-adopts the recorded node
// lease and reports this node's queue entry. found is false when there is
// none (never queued, released, or the lease expired while away: that case
// is logged loudly). A member's node holds only while it holds the member
// slot too; until then it is reported waiting: that is also how a node that
// became a member while holding its group's slot learns it must queue for
// the member slot before it may reboot.
func (l *Lock) Adopt(ctx context.Context) (rec Record, pos Position, found bool, err error) {
	member, members, err := l.refreshMember(ctx)
	if err != nil {
		return Record{}, Position{}, false, fmt.Errorf("adopting reboot slot: %w", err)
	}
	rec, pos, found, err = l.adoptSlot(ctx)
	if err != nil || !found || members == nil {
		return rec, pos, found, err
	}
	_, mpos, mfound, err := members.adoptSlot(ctx)
	if err != nil {
		return Record{}, Position{}, false, fmt.Errorf("etcd member slot: %w", err)
	}
	if pos.Holder && (!mfound || !mpos.Holder) {
		if !mfound {
			l.log.Warn("this node holds its group's reboot slot but not the cluster-wide etcd member slot it needs "+
				"(it became an etcd member after queueing): it queues for the member slot before rebooting", "member", member)
		}
		pos.Holder = false
	}
	return rec, pos, found, nil
}

package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// queue reads the group's whole queue and counts it here: WithCountOnly
// together with WithMaxCreateRev ignores the filter. Not WithKeysOnly either:
// etcd 3.7 answers that from its index without the lease IDs we check.
func (l *Lock) queue(ctx context.Context) ([]Entry, *mvccpb.KeyValue, int64, error) {
	resp, err := l.cli.Get(ctx, holdersPrefix(l.o.Prefix, l.o.Group), clientv3.WithPrefix())
	if err != nil {
		return nil, nil, 0, err
	}
	entries, mine := entriesOf(resp.Kvs, holdersPrefix(l.o.Prefix, l.o.Group), l.o.Node)
	return entries, mine, resp.Header.Revision, nil
}

func entriesOf(kvs []*mvccpb.KeyValue, prefix, node string) ([]Entry, *mvccpb.KeyValue) {
	var entries []Entry
	var mine *mvccpb.KeyValue
	for _, kv := range kvs {
		name := strings.TrimPrefix(string(kv.Key), prefix)
		entries = append(entries, Entry{Node: name, CreateRevision: kv.CreateRevision})
		if name == node {
			mine = kv
		}
	}
	return entries, mine
}

// acquireSlot queues this node in l's semaphore and blocks until it holds
// a slot. Calling it again while queued or holding keeps the place.
func (l *Lock) acquireSlot(ctx context.Context, target string, onPosition func(Position)) (Position, error) {
	s, err := l.session(ctx)
	if err != nil {
		return Position{}, fmt.Errorf("acquiring reboot slot: %w", err)
	}
	rec := Record{Node: l.o.Node, BootID: l.o.BootID, Target: target, Member: l.memberName(), MachineID: l.o.MachineID,
		QueuedAt: l.o.Now().UTC()}
	// A Put on an existing key keeps its CreateRevision: re-entering never
	// loses the place. A key of this name that another machine wrote is
	// never taken over.
	_, err = l.putOwn(ctx, l.holderKey(), s.Lease(), func(prev *mvccpb.KeyValue) any {
		r := rec
		var old Record
		if prev != nil && json.Unmarshal(prev.Value, &old) == nil && !old.QueuedAt.IsZero() {
			r.QueuedAt = old.QueuedAt // re-entering: keep the time we first queued
		}
		rec = r
		return r
	})
	if err != nil {
		return Position{}, fmt.Errorf("queueing for a reboot slot: %w", err)
	}
	slots := l.groupSlots(ctx)
	var last Position
	first := true
	report := func(pos Position) {
		if onPosition != nil && (first || pos != last) {
			onPosition(pos)
		}
		first, last = false, pos
	}
	for {
		entries, mine, rev, err := l.queue(ctx)
		if err != nil {
			return Position{}, fmt.Errorf("reading reboot slot queue: %w", err)
		}
		if mine == nil || clientv3.LeaseID(mine.Lease) != s.Lease() {
			return Position{}, l.lostOr(s, ErrDequeued)
		}
		pos, _ := Locate(entries, slots, l.o.Node)
		report(pos)
		if !pos.Holder {
			me := Entry{Node: l.o.Node, CreateRevision: mine.CreateRevision}
			pos, err = l.waitTurn(ctx, me, pos, rev, s.Done(), report)
			if errors.Is(err, errReread) {
				continue
			}
			if err != nil {
				return Position{}, err
			}
		}
		rec.AcquiredAt = l.o.Now().UTC()
		if err := l.markHeld(ctx, rec, mine.CreateRevision, s.Lease()); err != nil {
			return Position{}, l.lostOr(s, err)
		}
		l.log.Info("holding reboot slot", "slot", pos.Index+1, "slots", pos.Slots, "target", target)
		return pos, nil
	}
}

// groupSlots is the slot count this acquisition is judged by: the group's
// recorded count, read (and this agent's recorded, see DecideSlots) at
// each acquisition so that a host whose record was narrowed since follows.
// Agents of one group that disagree get a warning, and each takes no more
// than the smaller count. An unreadable record leaves lock.slots: the
// queue read that follows fails on the same etcd anyway.
func (l *Lock) groupSlots(ctx context.Context) int {
	if l.parent != nil {
		return l.o.Slots // the member slot is not configured
	}
	key := GroupConfigKey(l.o.Prefix, l.o.Group)
	gc := GroupConfig{Slots: l.o.Slots, By: "agent " + l.o.Node, UpdatedAt: l.o.Now().UTC()}
	d, rec, err := agreeSlots(ctx, l.cli, l.o.Prefix, l.o.Group, gc)
	if err != nil {
		l.log.Warn("reading the group's recorded slot count; using lock.slots", "err", err)
		return l.o.Slots
	}
	if d.Disagree {
		l.log.Warn("agents of this group disagree on lock.slots; set it the same on every host of the group (lock.slots in /etc/update-agent/config.d)",
			"lock_slots", l.o.Slots, "recorded_slots", rec.Slots, "recorded_by", rec.By,
			"recorded_at", rec.UpdatedAt, "key", key, "using_slots", d.Slots)
	}
	return d.Slots
}

// errReread: the watch cannot tell how far this waiter moved (compaction,
// cancellation, an event without its previous value); read the queue again.
var errReread = errors.New("reboot slot queue must be read again")

// waitTurn blocks until the waiter me, at pos in the queue as read at rev,
// holds a slot. It counts the deletions after rev instead of re-reading the
// queue on each one: with a fleet waiting, a read per release per waiter is
// what made hand-offs take seconds.
func (l *Lock) waitTurn(ctx context.Context, me Entry, pos Position, rev int64, leaseDone <-chan struct{}, report func(Position)) (Position, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	prefix := holdersPrefix(l.o.Prefix, l.o.Group)
	wch := l.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithFilterPut(), clientv3.WithPrevKV())
	for {
		select {
		case wr, ok := <-wch:
			if ctx.Err() != nil {
				return Position{}, fmt.Errorf("waiting for a reboot slot: %w", ctx.Err())
			}
			if !ok || wr.Err() != nil || wr.Canceled {
				// No leader, compaction or a closed watch: events may be
				// missing, so count afresh.
				return Position{}, errReread
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				deleted := Entry{Node: strings.TrimPrefix(string(ev.Kv.Key), prefix)}
				if ev.PrevKv != nil {
					deleted.CreateRevision = ev.PrevKv.CreateRevision
				}
				earlier, ok := AfterDeletion(me, pos.Index, deleted)
				if !ok {
					return Position{}, errReread
				}
				pos = PositionAt(earlier, max(pos.Queued-1, earlier+1), pos.Slots)
				report(pos)
				if pos.Holder {
					return pos, nil
				}
			}
		case <-leaseDone:
			return Position{}, ErrLeaseExpired
		case <-ctx.Done():
			return Position{}, fmt.Errorf("waiting for a reboot slot: %w", ctx.Err())
		}
	}
}

// markHeld records the acquisition time, fenced on our key and lease, and
// remembers the CreateRevision that fences later writes.
func (l *Lock) markHeld(ctx context.Context, rec Record, createRev int64, lease clientv3.LeaseID) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	key := l.holderKey()
	resp, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", createRev),
			clientv3.Compare(clientv3.LeaseValue(key), "=", lease)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return fmt.Errorf("recording reboot slot acquisition: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("recording reboot slot acquisition: %w", ErrDequeued)
	}
	l.mu.Lock()
	l.heldRev, l.heldBoot = createRev, rec.BootID
	l.mu.Unlock()
	return nil
}

func (l *Lock) lostOr(s interface{ Done() <-chan struct{} }, err error) error {
	select {
	case <-s.Done():
		return ErrLeaseExpired
	default:
		return err
	}
}

// adoptSlot re-attaches this node's entry in l's semaphore to the node
// lease and reports it; found is false when there is none.
func (l *Lock) adoptSlot(ctx context.Context) (rec Record, pos Position, found bool, err error) {
	s, err := l.session(ctx)
	if err != nil {
		return Record{}, Position{}, false, fmt.Errorf("adopting reboot slot: %w", err)
	}
	resp, err := l.cli.Get(ctx, holdersPrefix(l.o.Prefix, l.o.Group), clientv3.WithPrefix())
	if err != nil {
		return Record{}, Position{}, false, fmt.Errorf("adopting reboot slot: %w", err)
	}
	entries, mine := entriesOf(resp.Kvs, holdersPrefix(l.o.Prefix, l.o.Group), l.o.Node)
	if mine == nil {
		return Record{}, Position{}, false, nil
	}
	if err := json.Unmarshal(mine.Value, &rec); err != nil {
		return Record{}, Position{}, false, fmt.Errorf("adopting reboot slot: parsing %s: %w", mine.Key, err)
	}
	if ok, theirs := l.mine(mine, s.Lease()); !ok {
		return Record{}, Position{}, false, fmt.Errorf("adopting reboot slot: %w", l.conflict(mine, theirs))
	}
	if clientv3.LeaseID(mine.Lease) != s.Lease() {
		// Our key (this machine's) under a lease we lost track of (state
		// dir wiped): move it to the current lease; the Put keeps its
		// CreateRevision.
		l.log.Warn("queue entry was attached to an unknown lease; re-attaching",
			"old_lease_id", fmt.Sprintf("%x", mine.Lease))
		resp, err := l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(string(mine.Key)), "=", mine.ModRevision)).
			Then(clientv3.OpPut(string(mine.Key), string(mine.Value), clientv3.WithLease(s.Lease()))).
			Commit()
		if err != nil {
			return Record{}, Position{}, false, fmt.Errorf("adopting reboot slot: %w", err)
		}
		if !resp.Succeeded {
			return Record{}, Position{}, false, fmt.Errorf("adopting reboot slot: %w", ErrDequeued)
		}
	}
	pos, _ = Locate(entries, l.o.Slots, l.o.Node)
	if pos.Holder {
		l.mu.Lock()
		l.heldRev, l.heldBoot = mine.CreateRevision, rec.BootID
		l.mu.Unlock()
		l.log.Info("re-adopted reboot slot", "slot", pos.Index+1, "slots", pos.Slots,
			"target", rec.Target, "acquired_at", rec.AcquiredAt)
	}
	return rec, pos, true, nil
}

// slotFence is the condition that this node holds its slot in l's
// semaphore under lease.
func (l *Lock) slotFence(lease clientv3.LeaseID) ([]clientv3.Cmp, error) {
	l.mu.Lock()
	rev := l.heldRev
	l.mu.Unlock()
	if rev == 0 {
		return nil, ErrNotHolder
	}
	key := l.holderKey()
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", rev),
		clientv3.Compare(clientv3.LeaseValue(key), "=", lease),
	}, nil
}

// fence is the condition for writes that are only valid while holding: the
// group's slot and, for an etcd member, the member slot.
func (l *Lock) fence() ([]clientv3.Cmp, error) {
	l.mu.Lock()
	s := l.sess
	l.mu.Unlock()
	if s == nil {
		return nil, ErrNotHolder
	}
	cmps, err := l.slotFence(s.Lease())
	if err != nil {
		return nil, err
	}
	if members := l.memberSlot(); members != nil {
		mc, err := members.slotFence(s.Lease())
		if err != nil {
			return nil, fmt.Errorf("%w: it runs etcd member %q but does not hold the cluster-wide member slot",
				err, l.memberName())
		}
		cmps = append(cmps, mc...)
	}
	return cmps, nil
}

// Fenced applies ops only if this node still holds its slot.
func (l *Lock) Fenced(ctx context.Context, ops ...clientv3.Op) error {
	cmps, err := l.fence()
	if err != nil {
		return err
	}
	resp, err := l.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("fenced write: %w", err)
	}
	if !resp.Succeeded {
		return ErrNotHolder
	}
	return nil
}

// fenceTimeout bounds Fence: a partitioned node must learn quickly that it
// cannot prove it holds, and not finalize.
const fenceTimeout = 10 * time.Second

// Fence proves, right before an irreversible step (finalize-deployment),
// that this node holds its slot and will keep it through the reboot budget:
// the lease's keepalive is running, one keepalive round trip renews it to a
// full TTL (the slot then outlives the next TTL without further keepalives;
// anything under half the TTL is refused), and a linearizable transaction
// finds the holder key with this node's lease and create revision. A node
// cut off from etcd gets an error; one whose lease expired, or whose slot an
// operator released, gets ErrLeaseExpired or ErrNotHolder; so does one that
// runs an etcd member (looked up again here) without holding the member
// slot. Only nil means go.
func (l *Lock) Fence(ctx context.Context) error {
	// A node that became an etcd member since it acquired holds no member
	// slot: the fence fails, and acquiring again takes it.
	if _, _, err := l.refreshMember(ctx); err != nil {
		return fmt.Errorf("fencing the reboot slot: %w", err)
	}
	cmps, err := l.fence()
	if err != nil {
		return err
	}
	l.mu.Lock()
	s := l.sess
	l.mu.Unlock()
	if s == nil {
		return ErrNotHolder
	}
	select {
	case <-s.Done():
		return ErrLeaseExpired
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, min(fenceTimeout, l.o.TTL/2))
	defer cancel()
	ka, err := l.o.Leases.KeepAliveOnce(ctx, s.Lease())
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return ErrLeaseExpired
	}
	if err != nil {
		return fmt.Errorf("fencing the reboot slot: renewing the node lease: %w", err)
	}
	if left := time.Duration(ka.TTL) * time.Second; left*2 < l.o.TTL {
		return fmt.Errorf("fencing the reboot slot: the node lease has %v left of %v", left, l.o.TTL)
	}
	resp, err := l.cli.Txn(ctx).If(cmps...).Commit()
	if err != nil {
		return fmt.Errorf("fencing the reboot slot: %w", err)
	}
	if !resp.Succeeded {
		return l.lostOr(s, ErrNotHolder)
	}
	return nil
}

// Release gives the slot back after the post-boot checks passed (or leaves
// the queue): it deletes the queue entry and the announcement (fenced when
// holding), revokes the node lease and forgets it. If the slot was already
// gone (an operator released it) that is logged and the rest is still
// cleaned up. A holder that rebooted holding its slot (its key records
// another boot) writes the group's spacing marker in the transaction that
// deletes its key (spacing.go).
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	s := l.sess
	holding := l.heldRev != 0 && s != nil
	rebooted := l.heldBoot != "" && l.heldBoot != l.o.BootID
	l.mu.Unlock()
	if holding {
		err := l.releaseHeld(ctx, s, rebooted)
		if errors.Is(err, ErrNotHolder) {
			l.log.Warn("releasing: this node no longer held its reboot slot (released by an operator, or its lease expired)")
		} else if err != nil {
			return fmt.Errorf("releasing reboot slot: %w", err)
		}
	}
	// Not holding (a waiter, or a slot already lost), and the member slot:
	// delete this machine's keys, never those of another machine of the
	// same name.
	keys := []string{l.holderKey(), l.pendingKey()}
	members := l.memberSlot()
	if members != nil {
		keys = append(keys, members.holderKey())
	}
	if err := l.deleteOwn(ctx, keys...); err != nil {
		return fmt.Errorf("releasing reboot slot: %w", err)
	}
	l.mu.Lock()
	l.sess, l.heldRev, l.heldBoot = nil, 0, ""
	l.mu.Unlock()
	members.forget()
	l.dropMemberSlot()
	if s != nil {
		if err := s.Close(); err != nil {
			// The lease then expires after the TTL; our keys are gone.
			l.log.Warn("revoking node lease", "err", err)
		}
	}
	if err := removeLeaseState(l.o.StateDir); err != nil {
		return fmt.Errorf("releasing reboot slot: %w", err)
	}
	if holding {
		l.log.Info("released reboot slot")
	} else {
		l.log.Info("left the reboot slot queue")
	}
	return nil
}

// releaseHeld deletes the holder key and the announcement, fenced on the
// slot, with the spacing marker when the node rebooted holding it.
func (l *Lock) releaseHeld(ctx context.Context, s *concurrency.Session, rebooted bool) error {
	cmps, err := l.slotFence(s.Lease())
	if err != nil {
		return err
	}
	var mark *Marker
	if rebooted {
		if mark, err = NewMarker(ctx, l.cli, l.o.Prefix, l.o.Group, l.o.Node, l.o.MinInterval); err != nil {
			return err
		}
	}
	ops := append([]clientv3.Op{clientv3.OpDelete(l.holderKey()), clientv3.OpDelete(l.pendingKey())}, mark.Ops()...)
	resp, err := l.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		mark.Abandon(ctx)
		return ErrNotHolder
	}
	if mark != nil {
		if err := mark.Committed(ctx); err != nil {
			l.log.Warn("spacing marker written; its lease counts from a round trip before the release", "err", err)
		}
		l.log.Info("group's next reboot spaced by lock.min_interval", "marker", mark.Key(), "min_interval", l.o.MinInterval)
	}
	return nil
}

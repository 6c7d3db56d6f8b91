package fleetlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/lock"
)

// semaphore is the etcd side: FleetLock clients as entries of the agents'
// queue, each on a lease of its own.
type semaphore struct {
	cli    *clientv3.Client
	prefix string
	slots  int
	// groupSlots are the slots of groups served besides the agents' own
	// (zincati-only groups, fleetlock.groups); others have slots.
	groupSlots              map[string]int
	ttl, maxHold, queueHold time.Duration
	minInterval             time.Duration
	// maxWaiters bounds the group's FleetLock entries not granted: no
	// lease is granted for a new client beyond it (0: no bound).
	maxWaiters int
	clock      clockwork.Clock
	log        *slog.Logger
	// recorded are the groups whose slot count this process wrote.
	recorded sync.Map
}

// recordGroup writes group's slot count for `lock status` on other hosts
// (lock.GroupConfig), once per process.
func (s *semaphore) recordGroup(ctx context.Context, group string) error {
	if _, ok := s.recorded.Load(group); ok {
		return nil
	}
	gc := lock.GroupConfig{Slots: s.slotsOf(group), By: "fleetlock server", UpdatedAt: s.clock.Now().UTC()}
	if err := lock.WriteGroupConfig(ctx, s.cli, s.prefix, group, gc); err != nil {
		return err
	}
	s.recorded.Store(group, true)
	return nil
}

// slotsOf is the number of slots of group.
func (s *semaphore) slotsOf(group string) int {
	if group == lock.MembersGroup {
		return 1 // the cluster-wide member slot, as the agents take it
	}
	if n, ok := s.groupSlots[group]; ok {
		return n
	}
	return s.slots
}

// spacingOf is the min_interval of group: none for the member slot, as
// for the agents (spacing is the groups' business).
func (s *semaphore) spacingOf(group string) time.Duration {
	if group == lock.MembersGroup {
		return 0
	}
	return s.minInterval
}

func (s *semaphore) key(p Params) string {
	return lock.HoldersPrefix(s.prefix, p.Group) + lock.FleetLockNode(p.ID)
}

// errContended: another server changed the entry at the same time, more
// often than is plausible.
var errContended = errors.New("queue entry changed concurrently, try again")

// lock queues the client, or refreshes its entry (keeping its place), and
// marks it granted once it holds a slot, unless the group's previous release
// is younger than min_interval: then the entry keeps its slot ungranted and
// spacing says how long is left.
func (s *semaphore) lock(ctx context.Context, p Params, c Client) (lock.Position, bool, lock.SpacingState, error) {
	var none lock.SpacingState
	if err := s.recordGroup(ctx, p.Group); err != nil {
		s.log.Warn("recording the group's slot count for lock status", "group", p.Group, "err", err)
	}
	key := s.key(p)
	done := false
	for range 5 {
		var err error
		if done, err = s.upsert(ctx, p, key, c); err != nil {
			return lock.Position{}, false, none, err
		}
		if done {
			break
		}
	}
	if !done {
		return lock.Position{}, false, none, errContended
	}
	resp, err := s.cli.Get(ctx, lock.HoldersPrefix(s.prefix, p.Group), clientv3.WithPrefix())
	if err != nil {
		return lock.Position{}, false, none, fmt.Errorf("reading the queue of group %s: %w", p.Group, err)
	}
	node := lock.FleetLockNode(p.ID)
	pos, found := lock.Locate(lock.Entries(s.prefix, p.Group, resp.Kvs), s.slotsOf(p.Group), node)
	if !found || !pos.Holder {
		return pos, found, none, nil
	}
	var mine *mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		if string(kv.Key) == key {
			mine = kv
		}
	}
	e, err := parse(mine)
	if err != nil || !e.AcquiredAt.IsZero() {
		return pos, true, none, err // recursive: already granted
	}
	var unspaced []clientv3.Cmp
	if s.spacingOf(p.Group) > 0 {
		if sp, err := s.spacing(ctx, p); err != nil || sp.Active {
			return pos, true, sp, err
		}
		// Granted only while no marker exists: a release between the read
		// and the grant is seen.
		unspaced = append(unspaced, clientv3.Compare(clientv3.CreateRevision(lock.SpacingKey(s.prefix, p.Group)), "=", 0))
	}
	// AcquiredAt is for people (lock status); the hold lease times it.
	e.AcquiredAt = s.clock.Now().UTC()
	if e.HoldLease, err = s.grantTimer(ctx, s.maxHold); err != nil {
		return pos, true, none, err
	}
	ok, err := s.replace(ctx, mine, e, unspaced...)
	if err != nil || !ok {
		s.revoke(ctx, clientv3.LeaseID(e.HoldLease))
	}
	if err == nil && !ok && s.spacingOf(p.Group) > 0 {
		if sp, err := s.spacing(ctx, p); err != nil || sp.Active {
			return pos, true, sp, err
		}
	}
	if err != nil || !ok {
		return pos, ok, none, err
	}
	s.log.Info("FleetLock slot granted", "id", p.ID, "group", p.Group, "slot", pos.Index+1, "slots", pos.Slots,
		"waited", e.AcquiredAt.Sub(e.QueuedAt).Round(time.Second), "client", c.String())
	return pos, true, none, nil
}

// spacing reads the group's last release for a client whose turn came.
func (s *semaphore) spacing(ctx context.Context, p Params) (lock.SpacingState, error) {
	sp, err := lock.ReadSpacing(ctx, s.cli, s.prefix, p.Group)
	if err != nil {
		return sp, err
	}
	if sp.Active {
		s.log.Info("FleetLock slot held back by lock.min_interval", "id", p.ID, "group", p.Group,
			"released_by", sp.By, "left", sp.Left)
	}
	return sp, nil
}

// upsert creates the client's entry, or records that it asked again. An
// entry past its time (Tend) is dropped first, so a client whose hold
// expired queues afresh instead of holding on. done is false when another
// writer raced it. An entry made by another client is refused
// (KindNotOwner).
func (s *semaphore) upsert(ctx context.Context, p Params, key string, c Client) (done bool, err error) {
	now := s.clock.Now().UTC()
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("reading queue entry: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return s.create(ctx, p, key, c, now)
	}
	kv := resp.Kvs[0]
	e, err := parse(kv)
	if err != nil {
		return false, err
	}
	if err := s.owned(p, e, c, "pre-reboot"); err != nil {
		return false, err
	}
	t, err := s.timers(ctx, e)
	if err != nil {
		return false, err
	}
	if a := Tend(e.Record, t, now, s.maxHold, s.queueHold); a != Keep {
		s.expire(ctx, p, kv, e, a)
		return false, nil
	}
	e.LastSeen = now
	if e.Client == nil {
		// An older server's entry: its client from now on is the one
		// that asks for it.
		e.Client = &c
	}
	ok, err := s.replace(ctx, kv, e)
	if ok {
		// The lease may be near its end if no server tended it lately;
		// the wait timer restarts: the client asked.
		for _, id := range []int64{kv.Lease, e.SeenLease} {
			if id == 0 {
				continue
			}
			if _, err := s.cli.KeepAliveOnce(ctx, clientv3.LeaseID(id)); err != nil {
				s.log.Debug("refreshing FleetLock lease", "id", p.ID, "group", p.Group, "lease_id", fmt.Sprintf("%x", id), "err", err)
			}
		}
	}
	return ok, err
}

// owned refuses a request for an entry that another client made.
func (s *semaphore) owned(p Params, e entry, c Client, endpoint string) error {
	if Owns(e.Client, c) {
		return nil
	}
	s.log.Warn("FleetLock request refused: the entry belongs to another client", "endpoint", endpoint,
		"id", p.ID, "group", p.Group, "client", c.String(), "owner", e.Client.String())
	return errorf(KindNotOwner, "client id %s of group %s was queued by %s, not by %s; only that client may %s",
		p.ID, p.Group, e.Client, c, map[string]string{"pre-reboot": "ask for its slot", "steady-state": "release it"}[endpoint])
}

// create queues a new entry on a lease of its own, unless maxWaiters
// clients already wait in the group (KindQueueFull, before any lease is
// granted).
func (s *semaphore) create(ctx context.Context, p Params, key string, c Client, now time.Time) (bool, error) {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	if s.maxWaiters > 0 {
		n, rev, err := s.waiting(ctx, p.Group)
		if err != nil {
			return false, err
		}
		if n >= s.maxWaiters {
			s.log.Warn("FleetLock client not queued: fleetlock.max_waiters clients wait already", "id", p.ID,
				"group", p.Group, "client", c.String(), "waiting", n, "max_waiters", s.maxWaiters)
			return false, errorf(KindQueueFull, "%d FleetLock clients already wait in group %s (fleetlock.max_waiters); ask again later",
				n, p.Group)
		}
		// Nothing queued in the group since the count: concurrent
		// creations cannot pass the bound together.
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(lock.HoldersPrefix(s.prefix, p.Group)), "<", rev+1).
			WithPrefix())
	}
	e := entry{Record: lock.Record{Node: lock.FleetLockNode(p.ID), Kind: lock.KindFleetLock, QueuedAt: now, LastSeen: now},
		Client: &c}
	lease, err := s.cli.Grant(ctx, int64(s.ttl/time.Second))
	if err != nil {
		return false, fmt.Errorf("granting a lease for the queue entry: %w", err)
	}
	if e.SeenLease, err = s.grantTimer(ctx, s.queueHold); err != nil {
		s.revoke(ctx, lease.ID)
		return false, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return false, err
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(ctx, lease.ID)
		s.drop(ctx, e)
		if err != nil {
			return false, fmt.Errorf("queueing: %w", err)
		}
		return false, nil
	}
	s.log.Info("FleetLock client queued", "id", p.ID, "group", p.Group, "client", c.String(),
		"lease_id", fmt.Sprintf("%x", int64(lease.ID)))
	return true, nil
}

// replace rewrites an entry on its own lease if nobody changed it since kv
// was read (and cmps hold). The Put keeps the key's CreateRevision: its
// place in line.
func (s *semaphore) replace(ctx context.Context, kv *mvccpb.KeyValue, e entry, cmps ...clientv3.Cmp) (bool, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return false, err
	}
	key := string(kv.Key)
	resp, err := s.cli.Txn(ctx).
		If(append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)}, cmps...)...).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(clientv3.LeaseID(kv.Lease)))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("updating queue entry: %w", err)
	}
	return resp.Succeeded, nil
}

// unlock removes the client's entry, if any, and its lease. Releasing a
// granted slot (the client rebooted) writes the group's spacing marker in
// the same transaction, as an agent's release does. An entry that another
// client made is refused (KindNotOwner).
func (s *semaphore) unlock(ctx context.Context, p Params, c Client) error {
	return s.release(ctx, p, c, true)
}

// release is unlock; spaced false gives a slot back without starting the
// group's spacing: the client did not reboot.
func (s *semaphore) release(ctx context.Context, p Params, c Client, spaced bool) error {
	for range 5 {
		done, err := s.unlockOnce(ctx, p, c, spaced)
		if done || err != nil {
			return err
		}
	}
	return errContended
}

// unlockOnce is one attempt of unlock; done is false when another writer
// changed the entry between the read and the delete.
func (s *semaphore) unlockOnce(ctx context.Context, p Params, c Client, spaced bool) (done bool, err error) {
	key := s.key(p)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("reading queue entry: %w", err)
	}
	if len(resp.Kvs) == 0 {
		s.log.Debug("FleetLock steady-state: nothing held", "id", p.ID, "group", p.Group)
		return true, nil
	}
	prev := resp.Kvs[0]
	rec, _ := parse(prev)
	if err := s.owned(p, rec, c, "steady-state"); err != nil {
		return false, err
	}
	var mark *lock.Marker
	if spaced && !rec.AcquiredAt.IsZero() {
		if mark, err = lock.NewMarker(ctx, s.cli, s.prefix, p.Group, lock.FleetLockNode(p.ID), s.spacingOf(p.Group)); err != nil {
			return false, err
		}
	}
	tr, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", prev.ModRevision)).
		Then(append([]clientv3.Op{clientv3.OpDelete(key)}, mark.Ops()...)...).
		Commit()
	if err != nil {
		return false, fmt.Errorf("deleting queue entry: %w", err)
	}
	if !tr.Succeeded {
		mark.Abandon(ctx)
		return false, nil
	}
	if err := mark.Committed(ctx); err != nil {
		s.log.Warn("FleetLock release: spacing marker written; its lease counts from a round trip before the release",
			"id", p.ID, "group", p.Group, "err", err)
	}
	s.revoke(ctx, clientv3.LeaseID(prev.Lease))
	s.drop(ctx, rec)
	if rec.AcquiredAt.IsZero() {
		s.log.Info("FleetLock client left the queue", "id", p.ID, "group", p.Group)
	} else {
		s.log.Info("FleetLock slot released", "id", p.ID, "group", p.Group, "client", c.String(),
			"spacing_marker", mark != nil)
	}
	return true, nil
}

// tend keeps alive the leases of a group's FleetLock entries that are
// still wanted and revokes the others.
func (s *semaphore) tend(ctx context.Context, group string) error {
	resp, err := s.cli.Get(ctx, lock.HoldersPrefix(s.prefix, group), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("reading the queue of group %s: %w", group, err)
	}
	now := s.clock.Now()
	var errs []error
	for _, kv := range resp.Kvs {
		e, err := parse(kv)
		if err != nil || e.Kind != lock.KindFleetLock {
			continue // not ours to judge
		}
		t, err := s.timers(ctx, e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rec := e.Record
		switch a := Tend(rec, t, now, s.maxHold, s.queueHold); a {
		case Keep:
			_, err := s.cli.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				errs = append(errs, fmt.Errorf("keeping %s alive: %w", rec.Node, err))
			}
		case ExpireHold, ExpireWait:
			id, _ := lock.FleetLockID(rec.Node)
			s.expire(ctx, Params{ID: id, Group: group}, kv, e, a)
		}
	}
	return errors.Join(errs...)
}

// expire drops an entry past its time by revoking its lease.
func (s *semaphore) expire(ctx context.Context, p Params, kv *mvccpb.KeyValue, e entry, a Action) {
	s.revoke(ctx, clientv3.LeaseID(kv.Lease))
	s.drop(ctx, e)
	s.log.Warn("FleetLock entry dropped: "+expiryMessage(a, s.maxHold, s.queueHold),
		"id", p.ID, "group", p.Group, "entry", string(kv.Key))
}

func (s *semaphore) revoke(ctx context.Context, id clientv3.LeaseID) {
	if _, err := s.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// It then expires after its TTL.
		s.log.Warn("revoking FleetLock lease", "lease_id", fmt.Sprintf("%x", int64(id)), "err", err)
	}
}

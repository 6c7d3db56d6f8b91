package fleetlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	cli                     *clientv3.Client
	prefix                  string
	slots                   int
	ttl, maxHold, queueHold time.Duration
	minInterval             time.Duration
	clock                   clockwork.Clock
	log                     *slog.Logger
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
func (s *semaphore) lock(ctx context.Context, p Params) (lock.Position, bool, lock.SpacingState, error) {
	var none lock.SpacingState
	key := s.key(p)
	done := false
	for range 5 {
		var err error
		if done, err = s.upsert(ctx, p, key); err != nil {
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
	pos, found := lock.Locate(lock.Entries(s.prefix, p.Group, resp.Kvs), s.slots, node)
	if !found || !pos.Holder {
		return pos, found, none, nil
	}
	var mine *mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		if string(kv.Key) == key {
			mine = kv
		}
	}
	rec, err := parse(mine)
	if err != nil || !rec.AcquiredAt.IsZero() {
		return pos, true, none, err // recursive: already granted
	}
	var unspaced []clientv3.Cmp
	if s.minInterval > 0 {
		if sp, err := s.spacing(ctx, p); err != nil || sp.Active {
			return pos, true, sp, err
		}
		// Granted only while no marker exists: a release between the read
		// and the grant is seen.
		unspaced = append(unspaced, clientv3.Compare(clientv3.CreateRevision(lock.SpacingKey(s.prefix, p.Group)), "=", 0))
	}
	rec.AcquiredAt = s.clock.Now().UTC()
	ok, err := s.replace(ctx, mine, rec, unspaced...)
	if err == nil && !ok && s.minInterval > 0 {
		if sp, err := s.spacing(ctx, p); err != nil || sp.Active {
			return pos, true, sp, err
		}
	}
	if err != nil || !ok {
		return pos, ok, none, err
	}
	s.log.Info("FleetLock slot granted", "id", p.ID, "group", p.Group, "slot", pos.Index+1, "slots", pos.Slots,
		"waited", rec.AcquiredAt.Sub(rec.QueuedAt).Round(time.Second))
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
// writer raced it.
func (s *semaphore) upsert(ctx context.Context, p Params, key string) (done bool, err error) {
	now := s.clock.Now().UTC()
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("reading queue entry: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return s.create(ctx, p, key, now)
	}
	kv := resp.Kvs[0]
	rec, err := parse(kv)
	if err != nil {
		return false, err
	}
	if a := Tend(rec, now, s.maxHold, s.queueHold); a != Keep {
		s.expire(ctx, p, kv, a)
		return false, nil
	}
	rec.LastSeen = now
	ok, err := s.replace(ctx, kv, rec)
	if ok {
		// The lease may be near its end if no server tended it lately.
		if _, err := s.cli.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
			s.log.Debug("refreshing FleetLock lease", "id", p.ID, "group", p.Group, "err", err)
		}
	}
	return ok, err
}

// create queues a new entry on a lease of its own.
func (s *semaphore) create(ctx context.Context, p Params, key string, now time.Time) (bool, error) {
	rec := lock.Record{Node: lock.FleetLockNode(p.ID), Kind: lock.KindFleetLock, QueuedAt: now, LastSeen: now}
	b, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	lease, err := s.cli.Grant(ctx, int64(s.ttl/time.Second))
	if err != nil {
		return false, fmt.Errorf("granting a lease for the queue entry: %w", err)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(ctx, lease.ID)
		if err != nil {
			return false, fmt.Errorf("queueing: %w", err)
		}
		return false, nil
	}
	s.log.Info("FleetLock client queued", "id", p.ID, "group", p.Group, "lease_id", fmt.Sprintf("%x", int64(lease.ID)))
	return true, nil
}

// replace rewrites an entry on its own lease if nobody changed it since kv
// was read (and cmps hold). The Put keeps the key's CreateRevision: its
// place in line.
func (s *semaphore) replace(ctx context.Context, kv *mvccpb.KeyValue, rec lock.Record, cmps ...clientv3.Cmp) (bool, error) {
	b, err := json.Marshal(rec)
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
// the same transaction, as an agent's release does.
func (s *semaphore) unlock(ctx context.Context, p Params) error {
	for range 5 {
		done, err := s.unlockOnce(ctx, p)
		if done || err != nil {
			return err
		}
	}
	return errContended
}

// unlockOnce is one attempt of unlock; done is false when another writer
// changed the entry between the read and the delete.
func (s *semaphore) unlockOnce(ctx context.Context, p Params) (done bool, err error) {
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
	var mark *lock.Marker
	if !rec.AcquiredAt.IsZero() {
		if mark, err = lock.NewMarker(ctx, s.cli, s.prefix, p.Group, lock.FleetLockNode(p.ID), s.minInterval); err != nil {
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
	if rec.AcquiredAt.IsZero() {
		s.log.Info("FleetLock client left the queue", "id", p.ID, "group", p.Group)
	} else {
		s.log.Info("FleetLock slot released", "id", p.ID, "group", p.Group,
			"held", s.clock.Now().Sub(rec.AcquiredAt).Round(time.Second), "spacing_marker", mark != nil)
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
		rec, err := parse(kv)
		if err != nil {
			continue // not ours to judge
		}
		switch a := Tend(rec, now, s.maxHold, s.queueHold); a {
		case Keep:
			_, err := s.cli.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				errs = append(errs, fmt.Errorf("keeping %s alive: %w", rec.Node, err))
			}
		case ExpireHold, ExpireWait:
			id, _ := lock.FleetLockID(rec.Node)
			s.expire(ctx, Params{ID: id, Group: group}, kv, a)
		}
	}
	return errors.Join(errs...)
}

// expire drops an entry past its time by revoking its lease.
func (s *semaphore) expire(ctx context.Context, p Params, kv *mvccpb.KeyValue, a Action) {
	s.revoke(ctx, clientv3.LeaseID(kv.Lease))
	s.log.Warn("FleetLock entry dropped: "+expiryMessage(a, s.maxHold, s.queueHold),
		"id", p.ID, "group", p.Group, "entry", string(kv.Key))
}

func (s *semaphore) revoke(ctx context.Context, id clientv3.LeaseID) {
	if _, err := s.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// It then expires after its TTL.
		s.log.Warn("revoking FleetLock lease", "lease_id", fmt.Sprintf("%x", int64(id)), "err", err)
	}
}

func parse(kv *mvccpb.KeyValue) (lock.Record, error) {
	var rec lock.Record
	if kv == nil {
		return rec, errors.New("queue entry missing")
	}
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return rec, fmt.Errorf("parsing queue entry %s: %w", kv.Key, err)
	}
	return rec, nil
}

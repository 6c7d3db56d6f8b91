package fleetlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/lock"
)

// entry is a FleetLock client's queue entry: the agents' Record (which
// they read, ignoring the rest) with who made it and its timers.
type entry struct {
	lock.Record
	// Client made the entry; only it may ask for or release it (nil in
	// entries of older servers).
	Client *Client `json:"client,omitempty"`
	// HoldLease, granted with the slot, has TTL max_hold and is never kept
	// alive: the hold ends when etcd expires it, so no server's clock is
	// compared with a time another server wrote.
	HoldLease int64 `json:"hold_lease,omitempty"`
	// SeenLease has TTL QueueHold and is kept alive by each pre-reboot:
	// a waiter that stopped asking loses its place when it expires.
	SeenLease int64 `json:"seen_lease,omitempty"`
}

func parse(kv *mvccpb.KeyValue) (entry, error) {
	var e entry
	if kv == nil {
		return e, errors.New("queue entry missing")
	}
	if err := json.Unmarshal(kv.Value, &e); err != nil {
		return e, fmt.Errorf("parsing queue entry %s: %w", kv.Key, err)
	}
	return e, nil
}

// timers reads, from etcd, whether the entry's hold (granted) or wait
// timer still runs.
func (s *semaphore) timers(ctx context.Context, e entry) (Timers, error) {
	var t Timers
	var err error
	if !e.AcquiredAt.IsZero() {
		t.Hold, err = s.timer(ctx, e.HoldLease)
	} else {
		t.Seen, err = s.timer(ctx, e.SeenLease)
	}
	return t, err
}

func (s *semaphore) timer(ctx context.Context, id int64) (Timer, error) {
	if id == 0 {
		return NoTimer, nil
	}
	ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil {
		return NoTimer, fmt.Errorf("reading timer lease %x: %w", id, err)
	}
	if ttl.TTL < 0 {
		return Expired, nil
	}
	return Running, nil
}

// grantTimer grants a lease that only times: no key is put on it.
func (s *semaphore) grantTimer(ctx context.Context, d time.Duration) (int64, error) {
	l, err := s.cli.Grant(ctx, max(int64((d+time.Second-1)/time.Second), 1))
	if err != nil {
		return 0, fmt.Errorf("granting a timer lease: %w", err)
	}
	return int64(l.ID), nil
}

// drop revokes an entry's timer leases once the entry is gone.
func (s *semaphore) drop(ctx context.Context, e entry) {
	for _, id := range []int64{e.HoldLease, e.SeenLease} {
		if id != 0 {
			s.revoke(ctx, clientv3.LeaseID(id))
		}
	}
}

// waiting counts the group's FleetLock entries not granted, and the
// revision it read them at.
func (s *semaphore) waiting(ctx context.Context, group string) (int, int64, error) {
	resp, err := s.cli.Get(ctx, lock.HoldersPrefix(s.prefix, group), clientv3.WithPrefix())
	if err != nil {
		return 0, 0, fmt.Errorf("reading the queue of group %s: %w", group, err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if e, err := parse(kv); err == nil && e.Kind == lock.KindFleetLock && e.AcquiredAt.IsZero() {
			n++
		}
	}
	return n, resp.Header.Revision, nil
}

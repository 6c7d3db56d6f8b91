package gates

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Alarms lists the cluster's active alarms (NOSPACE, CORRUPT), members
// named where the member list knows them.
func Alarms(ctx context.Context, cli *clientv3.Client) ([]Alarm, error) {
	resp, err := cli.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing etcd alarms: %w", err)
	}
	if len(resp.Alarms) == 0 {
		return nil, nil
	}
	names := map[uint64]string{}
	if ml, err := cli.MemberList(ctx); err == nil {
		for _, m := range ml.Members {
			names[m.ID] = m.Name
		}
	}
	var out []Alarm
	for _, a := range resp.Alarms {
		name := names[a.MemberID]
		if name == "" {
			name = fmt.Sprintf("%x", a.MemberID)
		}
		out = append(out, Alarm{Member: name, Type: a.Alarm.String()})
	}
	return out, nil
}

// Spacing between reboots of a group is kept by etcd, not by local
// clocks: a released holder leaves a marker key on a lease of
// lock.min_interval, and the group's next reboot waits while it lives.
// etcd's leader expires the lease, so hosts with skewed clocks agree.

// SpacingKey is the marker of group under the lock's key prefix. Groups
// match [a-zA-Z0-9.-]+, so "_spacing" never collides with one.
func SpacingKey(prefix, group string) string {
	return strings.TrimRight(prefix, "/") + "/_spacing/" + group
}

// MarkReleased records that node released its slot of group now; the
// marker lives for interval. A zero interval records nothing.
func MarkReleased(ctx context.Context, cli *clientv3.Client, prefix, group, node string, interval time.Duration) error {
	if interval <= 0 {
		return nil
	}
	ttl := int64((interval + time.Second - 1) / time.Second)
	lease, err := cli.Grant(ctx, ttl)
	if err != nil {
		return fmt.Errorf("recording the release for lock.min_interval: %w", err)
	}
	if _, err := cli.Put(ctx, SpacingKey(prefix, group), node, clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("recording the release for lock.min_interval: %w", err)
	}
	return nil
}

// ReadSpacing says whether group's previous release is younger than its
// marker's lease.
func ReadSpacing(ctx context.Context, cli *clientv3.Client, prefix, group string) (Spacing, error) {
	key := SpacingKey(prefix, group)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return Spacing{}, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Spacing{}, nil
	}
	kv := resp.Kvs[0]
	s := Spacing{Active: true, By: string(kv.Value)}
	if kv.Lease != 0 {
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return Spacing{}, fmt.Errorf("reading the lease of %s: %w", key, err)
		}
		if ttl.TTL <= 0 { // expired between the two reads
			return Spacing{}, nil
		}
		s.Left = time.Duration(ttl.TTL) * time.Second
	}
	return s, nil
}

package gates

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/lock"
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
// clocks: the releasing holder's transaction (package lock) leaves a marker
// key on a lease of lock.min_interval, and the group's next reboot waits
// while it lives. etcd's leader expires the lease, so hosts with skewed
// clocks agree.

// SpacingKey is the marker of group under the lock's key prefix.
func SpacingKey(prefix, group string) string { return lock.SpacingKey(prefix, group) }

// MarkReleased is the engine's hook after a release (Gates.Rebooted). The
// release transaction already wrote the marker with the delete of the
// holder key; this writes one only when there is none (a release that
// found its slot already gone), never restarting the one the release
// wrote. A zero interval records nothing.
func MarkReleased(ctx context.Context, cli *clientv3.Client, prefix, group, node string, interval time.Duration) error {
	m, err := lock.NewMarker(ctx, cli, prefix, group, node, interval)
	if m == nil || err != nil {
		return err
	}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(m.Key()), "=", 0)).Then(m.Ops()...).Commit()
	if err != nil {
		return fmt.Errorf("recording the release for lock.min_interval: %w", err)
	}
	if !resp.Succeeded {
		m.Abandon(ctx)
		return nil
	}
	return m.Committed(ctx)
}

// ReadSpacing says whether group's previous release is younger than its
// marker's lease.
func ReadSpacing(ctx context.Context, cli *clientv3.Client, prefix, group string) (Spacing, error) {
	s, err := lock.ReadSpacing(ctx, cli, prefix, group)
	return Spacing{Active: s.Active, By: s.By, Left: s.Left}, err
}

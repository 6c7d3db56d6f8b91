package lock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Spacing (lock.min_interval): a group's next reboot waits until this long
// after the previous holder released after its reboot. The release writes
// the marker <prefix>/_spacing/<group> on a lease of min_interval in the
// same transaction that deletes its holder key: a waiter granted on that
// delete finds the marker, and no crash falls between the two. etcd's leader
// expires the lease, so hosts' clocks do not matter. Agents (Release) and
// FleetLock clients (package fleetlock, at steady-state) write the same
// marker.

// SpacingKey is the marker of group under prefix. Groups match
// [a-zA-Z0-9.-]+, so "_spacing" never collides with one.
func SpacingKey(prefix, group string) string {
	return strings.TrimRight(prefix, "/") + "/" + spacingDir + "/" + group
}

const spacingDir = "_spacing"

// SpacingState is what etcd says of a group's previous release.
type SpacingState struct {
	// Active is true while the release is younger than min_interval (the
	// marker's lease is alive).
	Active bool          `json:"active"`
	By     string        `json:"by"` // queue name of the holder that released
	Left   time.Duration `json:"left_ns"`
}

// ReadSpacing reads group's marker and how long it has left.
func ReadSpacing(ctx context.Context, cli *clientv3.Client, prefix, group string) (SpacingState, error) {
	key := SpacingKey(prefix, group)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return SpacingState{}, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return SpacingState{}, nil
	}
	return spacingOf(ctx, cli, resp.Kvs[0])
}

// spacingOf reads a marker's lease: how long it has left.
func spacingOf(ctx context.Context, cli *clientv3.Client, kv *mvccpb.KeyValue) (SpacingState, error) {
	key := string(kv.Key)
	s := SpacingState{Active: true, By: string(kv.Value)}
	if kv.Lease != 0 {
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return SpacingState{}, fmt.Errorf("reading the lease of %s: %w", key, err)
		}
		if ttl.TTL < 0 { // expired between the two reads
			return SpacingState{}, nil
		}
		s.Left = SpacingLeft(ttl.TTL, ttl.GrantedTTL)
	}
	return s, nil
}

// SpacingLeft is how long a marker whose lease etcd reports with ttl
// seconds left (of granted) has to live. etcd truncates the remaining time
// to whole seconds: 0 is still alive, under a second, so the left time is
// rounded up, and the marker counts as long as its key exists (taking 0
// for expired opened the gate up to a second early).
func SpacingLeft(ttl, granted int64) time.Duration {
	left := ttl + 1
	if granted > 0 {
		left = min(left, granted)
	}
	return time.Duration(left) * time.Second
}

// Marker is one release's spacing marker: its lease is granted before the
// release's transaction, which carries Ops.
type Marker struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
	key   string
	by    string
}

// NewMarker grants the lease of a marker saying that by released its slot
// of group; nil (no marker) when interval is 0.
func NewMarker(ctx context.Context, cli *clientv3.Client, prefix, group, by string, interval time.Duration) (*Marker, error) {
	if interval <= 0 {
		return nil, nil
	}
	ttl := int64((interval + time.Second - 1) / time.Second)
	lease, err := cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("granting the lease of the spacing marker (lock.min_interval): %w", err)
	}
	return &Marker{cli: cli, lease: lease.ID, key: SpacingKey(prefix, group), by: by}, nil
}

// Ops writes the marker, for the release's transaction (none for nil).
func (m *Marker) Ops() []clientv3.Op {
	if m == nil {
		return nil
	}
	return []clientv3.Op{clientv3.OpPut(m.key, m.by, clientv3.WithLease(m.lease))}
}

// Key is the marker's key ("" for nil).
func (m *Marker) Key() string {
	if m == nil {
		return ""
	}
	return m.key
}

// Committed restarts the lease's TTL now that the transaction committed:
// the spacing counts from the release, not from the grant a round trip
// earlier. If this fails the marker still stands, that round trip shorter.
func (m *Marker) Committed(ctx context.Context) error {
	if m == nil {
		return nil
	}
	if _, err := m.cli.KeepAliveOnce(ctx, m.lease); err != nil {
		return fmt.Errorf("restarting the spacing marker's lease at the release: %w", err)
	}
	return nil
}

// Abandon revokes the lease of a marker whose transaction did not commit.
// Not for a transaction whose outcome is unknown (an error): its marker
// may stand, and the lease then runs out by itself.
func (m *Marker) Abandon(ctx context.Context) {
	if m == nil {
		return
	}
	// On failure it expires after min_interval, holding no key.
	_, _ = m.cli.Revoke(ctx, m.lease)
}

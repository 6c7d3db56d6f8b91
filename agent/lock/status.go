package lock

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EntryStatus is one queue entry as operators see it.
type EntryStatus struct {
	Record
	CreateRevision int64         `json:"create_revision"`
	LeaseID        string        `json:"lease_id"`
	TTLLeft        time.Duration `json:"ttl_left_ns"`
	// Age is how long it has held (holders) or waited (waiters).
	Age time.Duration `json:"age_ns"`
	// Client is who made a FleetLock client's entry (package fleetlock
	// writes it; nil for agents and entries of older servers): the
	// operator sees which address a refused worker must come back from.
	Client *EntryClient `json:"client,omitempty"`
}

// EntryClient is the peer address, and the verified certificate's names,
// that a FleetLock entry is bound to.
type EntryClient struct {
	Addr string `json:"addr,omitempty"`
	Cert string `json:"cert,omitempty"`
}

// GroupStatus is one group's queue and announcements.
type GroupStatus struct {
	Group string `json:"group"`
	Slots int    `json:"slots"`
	// SlotsBy is who recorded Slots in etcd (GroupConfig.By); "" when
	// none did and Slots is the local lock.slots, which a FleetLock group
	// with slots of its own does not share.
	SlotsBy string `json:"slots_by,omitempty"`
	// SlotsAt is when SlotsBy recorded it (SlotsDisagreement says it).
	SlotsAt time.Time      `json:"slots_updated_at,omitzero"`
	Holders []EntryStatus  `json:"holders"`
	Waiters []EntryStatus  `json:"waiters"`
	Pending []Announcement `json:"pending"`
	// Spacing is the group's last release while lock.min_interval has not
	// passed since it (nil: none): the next reboot waits for it.
	Spacing *SpacingState `json:"spacing,omitempty"`
}

// Status reads every group under prefix (or only group, when set). Each
// group's slot count, which splits its queue into holders and waiters, is
// the one its users recorded (GroupConfig); slots, the local lock.slots, is
// only for a group without one.
func Status(ctx context.Context, cli *clientv3.Client, prefix string, slots int, group string, now time.Time) ([]GroupStatus, error) {
	prefix = strings.TrimRight(prefix, "/")
	from := prefix + "/"
	if group != "" {
		from = groupPrefix(prefix, group)
	}
	recorded, err := readGroupConfigs(ctx, cli, prefix, group)
	if err != nil {
		return nil, err
	}
	resp, err := cli.Get(ctx, from, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading lock state under %s: %w", from, err)
	}
	groups := map[string]*GroupStatus{}
	queues := map[string][]EntryStatus{}
	get := func(g string) *GroupStatus {
		if groups[g] == nil {
			groups[g] = &GroupStatus{Group: g, Slots: slots}
			if gc, ok := recorded[g]; ok {
				groups[g].Slots, groups[g].SlotsBy, groups[g].SlotsAt = gc.Slots, gc.By, gc.UpdatedAt
			}
			if g == MembersGroup {
				groups[g].Slots, groups[g].SlotsBy, groups[g].SlotsAt = 1, "", time.Time{}
			}
		}
		return groups[g]
	}
	ttls := map[int64]time.Duration{}
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), prefix+"/"), "/")
		if len(parts) == 2 && parts[0] == spacingDir {
			if sp, err := spacingOf(ctx, cli, kv); err == nil && sp.Active {
				get(parts[1]).Spacing = &sp
			}
			continue
		}
		if len(parts) != 3 {
			continue
		}
		g, kind := parts[0], parts[1]
		switch kind {
		case "holders":
			var rec Record
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				rec = Record{Node: parts[2]}
			}
			ttl, ok := ttls[kv.Lease]
			if !ok && kv.Lease != 0 {
				if r, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil {
					ttl = time.Duration(r.TTL) * time.Second
				}
				ttls[kv.Lease] = ttl
			}
			var owner struct {
				Client *EntryClient `json:"client"`
			}
			_ = json.Unmarshal(kv.Value, &owner) // only FleetLock entries have one
			get(g)
			queues[g] = append(queues[g], EntryStatus{Record: rec, CreateRevision: kv.CreateRevision,
				LeaseID: fmt.Sprintf("%x", kv.Lease), TTLLeft: ttl, Client: owner.Client})
		case "pending":
			var a Announcement
			if err := json.Unmarshal(kv.Value, &a); err != nil {
				a = Announcement{Node: parts[2]}
			}
			get(g).Pending = append(get(g).Pending, a)
		}
	}
	if group != "" {
		// The marker is outside the group's prefix.
		sp, err := ReadSpacing(ctx, cli, prefix, group)
		if err != nil {
			return nil, err
		}
		if sp.Active {
			get(group).Spacing = &sp
		}
	}
	var out []GroupStatus
	for g, gs := range groups {
		q := queues[g]
		sort.Slice(q, func(i, j int) bool { return q[i].CreateRevision < q[j].CreateRevision })
		n := min(gs.Slots, len(q))
		for i := range q {
			since := q[i].QueuedAt
			if i < n && !q[i].AcquiredAt.IsZero() {
				since = q[i].AcquiredAt
			}
			if !since.IsZero() {
				q[i].Age = now.Sub(since)
			}
		}
		gs.Holders, gs.Waiters = q[:n], q[n:]
		out = append(out, *gs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

// ReleaseNode is the operator's override: it removes node's queue entry and
// announcement in group, and its entry for the etcd member slot, freeing
// its slots at once. An agent still running on
// that node finds its fenced writes refused. It reports whether anything was
// there.
func ReleaseNode(ctx context.Context, cli *clientv3.Client, prefix, group, node string) (bool, error) {
	prefix = strings.TrimRight(prefix, "/")
	if group == "" || node == "" || strings.Contains(group+node, "/") {
		return false, fmt.Errorf("releasing %q in group %q: group and node must be non-empty names", node, group)
	}
	resp, err := cli.Txn(ctx).Then(
		clientv3.OpDelete(holdersPrefix(prefix, group)+node),
		clientv3.OpDelete(pendingPrefix(prefix, group)+node),
		clientv3.OpDelete(holdersPrefix(prefix, MembersGroup)+node),
	).Commit()
	if err != nil {
		return false, fmt.Errorf("releasing %s in group %s: %w", node, group, err)
	}
	var deleted int64
	for _, r := range resp.Responses {
		deleted += r.GetResponseDeleteRange().Deleted
	}
	return deleted > 0, nil
}

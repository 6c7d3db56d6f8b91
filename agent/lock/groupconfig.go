package lock

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A group's slot count lives in the configuration of whoever uses the group:
// the agents' lock.slots, or a FleetLock server's [[fleetlock.groups]] slots.
// An operator's `lock status` on another host cannot know it, so the users
// record it under <prefix>/_groups/<group> (no lease: it outlives them) and
// status reads it from there.

const groupsDir = "_groups"

// GroupConfigKey is group's recorded configuration. Groups match
// [a-zA-Z0-9.-]+, so "_groups" never collides with one.
func GroupConfigKey(prefix, group string) string {
	return strings.TrimRight(prefix, "/") + "/" + groupsDir + "/" + group
}

// GroupConfig is the value of a group's configuration key.
type GroupConfig struct {
	Slots int `json:"slots"`
	// By says who wrote it last: "agent <node>" or "fleetlock <node>".
	By        string    `json:"by"`
	UpdatedAt time.Time `json:"updated_at"`
}

// WriteGroupConfig records group's slots, unless the same count is already
// recorded: a restart or a periodic rewrite costs a read, not a revision.
func WriteGroupConfig(ctx context.Context, cli *clientv3.Client, prefix, group string, gc GroupConfig) error {
	key := GroupConfigKey(prefix, group)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) > 0 {
		var old GroupConfig
		if json.Unmarshal(resp.Kvs[0].Value, &old) == nil && old.Slots == gc.Slots {
			return nil
		}
	}
	b, err := json.Marshal(gc)
	if err != nil {
		return err
	}
	if _, err := cli.Put(ctx, key, string(b)); err != nil {
		return fmt.Errorf("recording the slots of group %s in %s: %w", group, key, err)
	}
	return nil
}

// readGroupConfigs reads the recorded configuration of every group (or of
// group only, when set).
func readGroupConfigs(ctx context.Context, cli *clientv3.Client, prefix, group string) (map[string]GroupConfig, error) {
	from, opts := GroupConfigKey(prefix, group), []clientv3.OpOption(nil)
	if group == "" {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := cli.Get(ctx, from, opts...)
	if err != nil {
		return nil, fmt.Errorf("reading group configuration under %s: %w", from, err)
	}
	out := map[string]GroupConfig{}
	for _, kv := range resp.Kvs {
		var gc GroupConfig
		if json.Unmarshal(kv.Value, &gc) != nil || gc.Slots < 1 {
			continue // unreadable: fall back to the local count
		}
		out[strings.TrimPrefix(string(kv.Key), GroupConfigKey(prefix, ""))] = gc
	}
	return out, nil
}

// SlotsDecision is what an agent makes of its group's recorded count.
type SlotsDecision struct {
	// Slots is the count this agent's queue position is judged by: never
	// more than its own lock.slots, nor than another writer's recorded
	// count, so one host configured wider cannot widen the group.
	Slots int
	// Disagree: another writer recorded a different count (warn).
	Disagree bool
	// Record: write this agent's count. Never over another writer's
	// smaller count: the next acquisition of the narrower hosts would
	// then read the wider one.
	Record bool
}

// DecideSlots is the slot count an agent with lock.slots own, writing as
// me ("agent <node>"), uses given what it found recorded (found: a
// readable config with slots >= 1).
func DecideSlots(own int, me string, recorded GroupConfig, found bool) SlotsDecision {
	switch {
	case !found || recorded.Slots < 1:
		return SlotsDecision{Slots: own, Record: true}
	case recorded.Slots == own:
		return SlotsDecision{Slots: own}
	case recorded.By == me:
		// Our own record from before lock.slots changed here.
		return SlotsDecision{Slots: own, Record: true}
	}
	return SlotsDecision{Slots: min(own, recorded.Slots), Disagree: true, Record: own < recorded.Slots}
}

// SlotsDisagreement says, for `lock status` and doctor, how the group's
// recorded count (g.Slots, by g.SlotsBy) differs from this host's
// lock.slots own; "" when it does not or nobody recorded one.
func SlotsDisagreement(g GroupStatus, own int) string {
	if g.SlotsBy == "" || g.Slots == own || g.Group == MembersGroup {
		return ""
	}
	at := ""
	if !g.SlotsAt.IsZero() {
		at = " at " + g.SlotsAt.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("agents of group %s disagree on lock.slots: this host's is %d, %s recorded %d%s; "+
		"each agent takes no more than the smaller, but set lock.slots (/etc/update-agent/config.d) the same on every host of the group",
		g.Group, own, g.SlotsBy, g.Slots, at)
}

// agreeSlots reads group's recorded count and, when DecideSlots says so,
// records gc (an agent's) in a transaction on what it read: two agents
// starting at once decide on each other's record, not on a stale read.
func agreeSlots(ctx context.Context, cli *clientv3.Client, prefix, group string, gc GroupConfig) (SlotsDecision, GroupConfig, error) {
	key := GroupConfigKey(prefix, group)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return SlotsDecision{}, GroupConfig{}, fmt.Errorf("reading %s: %w", key, err)
	}
	kvs := resp.Kvs
	for attempt := 0; ; attempt++ {
		var rec GroupConfig
		var modRev int64
		found := false
		if len(kvs) > 0 {
			modRev = kvs[0].ModRevision
			found = json.Unmarshal(kvs[0].Value, &rec) == nil && rec.Slots >= 1
		}
		d := DecideSlots(gc.Slots, gc.By, rec, found)
		if !d.Record || attempt == 2 {
			return d, rec, nil
		}
		b, err := json.Marshal(gc)
		if err != nil {
			return SlotsDecision{}, GroupConfig{}, err
		}
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, string(b))).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return SlotsDecision{}, GroupConfig{}, fmt.Errorf("recording the slots of group %s in %s: %w", group, key, err)
		}
		if tr.Succeeded {
			return d, rec, nil
		}
		kvs = tr.Responses[0].GetResponseRange().Kvs
	}
}

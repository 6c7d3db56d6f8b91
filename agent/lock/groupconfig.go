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

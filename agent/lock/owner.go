package lock

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MachineIDPath is where systemd keeps the host's machine ID. agent.node_name
// defaults to the host name, which two machines can share; the machine ID
// tells them apart.
const MachineIDPath = "/etc/machine-id"

// ReadMachineID reads a machine-id file.
func ReadMachineID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the machine ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || strings.ContainsAny(id, " \t\n/") {
		return "", fmt.Errorf("reading the machine ID: %s holds %q, not a machine ID", path, id)
	}
	return id, nil
}

// owner is the part of a holder record or an announcement that says whose
// it is.
type owner struct {
	MachineID string `json:"machine_id"`
}

// mine says whether kv, a key of this node's name, belongs to this machine:
// its machine ID is ours, or (a record written before machine IDs were
// recorded) it is attached to our lease.
func (l *Lock) mine(kv *mvccpb.KeyValue, lease clientv3.LeaseID) (bool, string) {
	var o owner
	if err := json.Unmarshal(kv.Value, &o); err != nil {
		return false, ""
	}
	if o.MachineID == "" {
		return lease != 0 && clientv3.LeaseID(kv.Lease) == lease, ""
	}
	return o.MachineID == l.o.MachineID, o.MachineID
}

func (l *Lock) conflict(kv *mvccpb.KeyValue, theirs string) error {
	return &NameConflictError{Key: string(kv.Key), Node: l.o.Node, Theirs: theirs, Ours: l.o.MachineID}
}

// putOwn writes key under lease unless it belongs to another machine; value
// builds the record from the previous one (nil when there is none). The
// write is a transaction on the ModRevision read, so a second machine
// writing meanwhile is seen, never overwritten.
func (l *Lock) putOwn(ctx context.Context, key string, lease clientv3.LeaseID, value func(prev *mvccpb.KeyValue) any) (*mvccpb.KeyValue, error) {
	for {
		resp, err := l.cli.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		var prev *mvccpb.KeyValue
		var modRev int64
		if len(resp.Kvs) == 1 {
			prev, modRev = resp.Kvs[0], resp.Kvs[0].ModRevision
			if ok, theirs := l.mine(prev, lease); !ok {
				return nil, l.conflict(prev, theirs)
			}
		}
		b, err := json.Marshal(value(prev))
		if err != nil {
			return nil, err
		}
		tr, err := l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease))).
			Commit()
		if err != nil {
			return nil, err
		}
		if tr.Succeeded {
			return prev, nil
		}
	}
}

// deleteOwn deletes keys of this node that belong to this machine; another
// machine's key of the same name is left alone (and logged).
func (l *Lock) deleteOwn(ctx context.Context, keys ...string) error {
	var lease clientv3.LeaseID
	l.mu.Lock()
	if l.sess != nil {
		lease = l.sess.Lease()
	}
	l.mu.Unlock()
	for _, key := range keys {
		for {
			resp, err := l.cli.Get(ctx, key)
			if err != nil {
				return err
			}
			if len(resp.Kvs) == 0 {
				break
			}
			kv := resp.Kvs[0]
			if ok, theirs := l.mine(kv, lease); !ok {
				l.log.Warn("not deleting a key of this node's name that belongs to another machine", "err", l.conflict(kv, theirs))
				break
			}
			tr, err := l.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
				Then(clientv3.OpDelete(key)).Commit()
			if err != nil {
				return err
			}
			if tr.Succeeded {
				break
			}
		}
	}
	return nil
}

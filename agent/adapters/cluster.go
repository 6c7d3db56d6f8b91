package adapters

import (
	"context"
	"fmt"
	"slices"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdmember"
)

// Cluster is engine.Cluster over agent/etcdmember, following its pure
// rules: MayAcquire for who queues when, MayReboot for what "safe" means.
type Cluster struct {
	C      *etcdmember.Cluster
	Policy etcdmember.Policy
	// Lock, when set, tells which members still have an update pending, so
	// leadership moves to a member already updated.
	Lock *Lock
}

func (c Cluster) local(ctx context.Context) (string, error) {
	m, found, err := c.C.Local(ctx)
	if err != nil || !found {
		return "", err
	}
	return m.Name, nil
}

// MayQueue applies etcdmember.MayAcquire to the cluster's health and the
// group's announcements: a leader queues only once no other member has an
// update pending, and nobody decides while etcd has no leader.
func (c Cluster) MayQueue(ctx context.Context) (engine.QueueOrder, error) {
	name, err := c.local(ctx)
	if err != nil {
		return engine.QueueOrder{}, err
	}
	s := etcdmember.Situation{Local: name}
	if name != "" && c.Policy.FollowersFirst {
		if s.Health, err = c.C.Health(ctx); err != nil {
			return engine.QueueOrder{}, err
		}
		if c.Lock != nil {
			if s.PendingMembers, err = c.Lock.pendingMembers(ctx); err != nil {
				return engine.QueueOrder{}, err
			}
		}
	}
	d := etcdmember.MayAcquire(c.Policy, s)
	q := engine.QueueOrder{MayQueue: d.Verdict == etcdmember.Proceed, Reason: d.Reason, Pending: s.PendingMembers}
	if q.MayQueue {
		q.Unannounced = etcdmember.Unannounced(s)
	}
	return q, nil
}

// LocalIsLeader reports whether the local member leads a cluster with
// another voter to hand leadership to (a single member has none).
func (c Cluster) LocalIsLeader(ctx context.Context) (bool, error) {
	name, err := c.local(ctx)
	if err != nil || name == "" {
		return false, err
	}
	h, err := c.C.Health(ctx)
	if err != nil {
		return false, err
	}
	l, ok := h.Leader()
	return ok && l.Name == name && etcdmember.Voters(h) > 1, nil
}

// SafeToReboot applies etcdmember.MayReboot, leaving the leadership move to
// the engine (which asks for it separately). A refusal (a cluster too small
// to lose this member) wraps engine.ErrRefused.
func (c Cluster) SafeToReboot(ctx context.Context) (bool, string, error) {
	name, err := c.local(ctx)
	if err != nil {
		return false, "", err
	}
	h, err := c.C.Health(ctx)
	if err != nil {
		return false, "", err
	}
	p := c.Policy
	p.MoveLeader = false
	d := etcdmember.MayReboot(p, etcdmember.Situation{Local: name, Health: h})
	if d.Verdict == etcdmember.Refuse {
		return false, d.Reason, fmt.Errorf("%w: %s", engine.ErrRefused, d.Reason)
	}
	return d.Verdict == etcdmember.Proceed, d.Reason, nil
}

// MoveLeaderAway hands leadership to a follower, preferring one whose node
// has no update pending (already updated).
func (c Cluster) MoveLeaderAway(ctx context.Context) error {
	var pending []string
	if c.Lock != nil {
		var err error
		if pending, err = c.Lock.pendingMembers(ctx); err != nil {
			return fmt.Errorf("moving leadership: %w", err)
		}
	}
	_, err := c.C.MoveLeaderAway(ctx, func(name string) bool { return !slices.Contains(pending, name) })
	return err
}

// LocalHealthy reports whether the local member is healthy and caught up.
func (c Cluster) LocalHealthy(ctx context.Context) (bool, string, error) {
	name, err := c.local(ctx)
	if err != nil {
		return false, "", err
	}
	if name == "" {
		return true, "", nil // no member on this host
	}
	h, err := c.C.Health(ctx)
	if err != nil {
		return false, "", err
	}
	m, ok := h.ByName(name)
	if !ok {
		return false, fmt.Sprintf("member %s is not in the cluster's health report", name), nil
	}
	if p := h.Problem(m, c.C.MaxLag()); p != "" {
		return false, fmt.Sprintf("member %s: %s", name, p), nil
	}
	return true, "", nil
}

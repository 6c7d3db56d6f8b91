package fleetlock

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
)

// LocalMember serves this host's own zincati as its etcd member (local.go).
type LocalMember struct {
	// NodeID is this host's zincati FleetLock id (graph.NodeUUID of
	// /etc/machine-id, or identity.node_uuid).
	NodeID string
	// Cluster finds the local member and judges the cluster, as for the
	// agent's own reboot (*etcdmember.Cluster).
	Cluster MemberCluster
	// Policy is the agents' [leader] and etcd.allow_quorum_loss.
	Policy etcdmember.Policy
}

// MemberCluster is what the local member's reboot needs of the cluster.
type MemberCluster interface {
	Local(ctx context.Context) (etcdmember.Member, bool, error)
	Health(ctx context.Context) (etcdmember.Health, error)
	MoveLeaderAway(ctx context.Context, prefer func(memberName string) bool) (etcdmember.Member, error)
}

// localMember names this host's etcd member when the request is its own
// zincati's ("" otherwise: an ordinary client). Not knowing whether the
// host runs a member refuses: it may.
func (s *Server) localMember(ctx context.Context, p Params, c Client) (string, *Error) {
	lm := s.o.LocalMember
	if lm == nil {
		return "", nil
	}
	if ok, why := LocalClient(lm.NodeID, p.ID, c, s.o.Proxies); !ok {
		s.log.Debug("FleetLock client is not this host's zincati", "id", p.ID, "client", c.String(), "reason", why)
		return "", nil
	}
	m, found, err := lm.Cluster.Local(ctx)
	if err != nil {
		s.log.Error("FleetLock: finding this host's etcd member for its zincati", "id", p.ID, "err", err)
		return "", errorf(KindFailedLock, "finding this host's etcd member: %v", err)
	}
	if !found {
		return "", nil
	}
	return m.Name, nil
}

// preRebootLocal is the pre-reboot of this host's zincati, member member:
// the engine's order (leader rule, group slot, member slot, quorum,
// leadership away) in one non-blocking answer; zincati asks again.
func (s *Server) preRebootLocal(ctx context.Context, p Params, c Client, member string) *Error {
	lm := s.o.LocalMember
	pending, err := s.pendingMembers(ctx, p.Group, member)
	if err != nil {
		return errorf(KindFailedLock, "%v", err)
	}
	// The leader rule decides whether to queue, as for the agent: once
	// queued, the member keeps its place.
	queued, err := s.queued(ctx, p)
	if err != nil {
		return errorf(KindFailedLock, "%v", err)
	}
	if !queued {
		h, err := lm.Cluster.Health(ctx)
		if err != nil {
			return errorf(KindFailedLock, "%v", err)
		}
		sit := etcdmember.Situation{Local: member, Health: h, PendingMembers: pending}
		d := etcdmember.MayAcquire(lm.Policy, sit)
		if e := MemberAnswer(member, d); e != nil {
			s.log.Info("FleetLock: this host's etcd member may not queue yet", "id", p.ID, "member", member, "reason", d.Reason)
			return e
		}
		// A cluster too small to lose the member: queueing would only
		// block the others.
		if d := etcdmember.MayReboot(lm.Policy, sit); d.Verdict == etcdmember.Refuse {
			s.log.Warn("FleetLock: this host's etcd member may never reboot under this configuration", "id", p.ID,
				"member", member, "reason", d.Reason)
			return MemberAnswer(member, d)
		}
	}
	// The group's slot first, then the member slot: the agents' order, so
	// no two wait for each other.
	for _, g := range []string{p.Group, lock.MembersGroup} {
		gp := Params{ID: p.ID, Group: g}
		pos, found, spacing, err := s.sem.lock(ctx, gp, c)
		if err != nil {
			return s.lockError(gp, err)
		}
		if e := Answer(pos, found, g, spacing); e != nil {
			return e
		}
	}
	// Leadership moves at most once per request; the check after the move
	// is on fresh health.
	for range 2 {
		h, err := lm.Cluster.Health(ctx)
		if err != nil {
			return errorf(KindFailedLock, "%v", err)
		}
		d := etcdmember.MayReboot(lm.Policy, etcdmember.Situation{Local: member, Health: h})
		if d.Verdict == etcdmember.Refuse {
			// As the engine: waiting cannot help, the slots go back (no
			// spacing: nothing rebooted).
			s.withdraw(ctx, p, c)
		}
		if d.Verdict != etcdmember.MoveLeadership {
			if e := MemberAnswer(member, d); e != nil {
				s.log.Warn("FleetLock: this host's etcd member holds its slots but may not reboot", "id", p.ID, "member", member,
					"reason", d.Reason)
				return e
			}
			s.log.Info("FleetLock: this host's etcd member may reboot", "id", p.ID, "member", member, "reason", d.Reason)
			return nil
		}
		to, err := lm.Cluster.MoveLeaderAway(ctx, func(name string) bool { return !slices.Contains(pending, name) })
		if err != nil {
			s.log.Error("FleetLock: moving etcd leadership away before this host's reboot", "member", member, "err", err)
			return errorf(KindFailedLock, "%v", err)
		}
		s.log.Info("FleetLock: moved etcd leadership away before this host's reboot", "member", member, "to_member", to.Name)
	}
	return MemberAnswer(member, etcdmember.Decision{Verdict: etcdmember.Wait, Reason: "it still leads after leadership was moved"})
}

// steadyStateLocal releases the member slot, then the group's, of this
// host's zincati once its member is healthy (member "" : the host runs
// none now; what it holds is released).
func (s *Server) steadyStateLocal(ctx context.Context, p Params, c Client, member string) error {
	mp := Params{ID: p.ID, Group: lock.MembersGroup}
	if member != "" {
		held := false
		for _, q := range []Params{p, mp} {
			ok, err := s.queued(ctx, q)
			if err != nil {
				return err
			}
			held = held || ok
		}
		if held {
			h, err := s.o.LocalMember.Cluster.Health(ctx)
			if err != nil {
				return err
			}
			m, listed := h.ByName(member)
			problem := ""
			if listed {
				problem = h.Problem(m, s.o.LocalMember.Policy.MaxLag)
			}
			if e := SteadyAnswer(member, listed, problem); e != nil {
				s.log.Info("FleetLock: this host's etcd member is not healthy yet; slots kept", "id", p.ID, "member", member,
					"reason", e.Value)
				return e
			}
		}
	}
	if err := s.sem.unlock(ctx, mp, c); err != nil {
		return err
	}
	return s.sem.unlock(ctx, p, c)
}

// withdraw gives both slots back, member slot first, without spacing.
func (s *Server) withdraw(ctx context.Context, p Params, c Client) {
	for _, g := range []string{lock.MembersGroup, p.Group} {
		if err := s.sem.release(ctx, Params{ID: p.ID, Group: g}, c, false); err != nil {
			s.log.Warn("FleetLock: giving back this host's slot", "id", p.ID, "group", g, "err", err)
		}
	}
}

// queued says whether the client has an entry in p.Group.
func (s *Server) queued(ctx context.Context, p Params) (bool, error) {
	resp, err := s.sem.cli.Get(ctx, s.sem.key(p), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("reading queue entry: %w", err)
	}
	return resp.Count > 0, nil
}

// pendingMembers are the members of other nodes of group with an update
// announced: a leader lets them go first, and leadership goes to one
// without (adapters.Cluster does the same for the agent).
func (s *Server) pendingMembers(ctx context.Context, group, local string) ([]string, error) {
	resp, err := s.sem.cli.Get(ctx, lock.PendingPrefix(s.o.Prefix, group), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("listing pending updates: %w", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		var a lock.Announcement
		if json.Unmarshal(kv.Value, &a) == nil && a.Member != "" && a.Member != local {
			out = append(out, a.Member)
		}
	}
	return out, nil
}

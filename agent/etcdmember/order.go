package etcdmember

import (
	"fmt"
	"slices"
	"strings"
)

// Verdict is what the ordering rules allow now.
type Verdict int

const (
	// Proceed: go ahead (take the slot / reboot).
	Proceed Verdict = iota
	// Wait: not now; Reason says why. Re-evaluate when something changes.
	Wait
	// MoveLeadership: the local member leads; move leadership away, confirm
	// it moved, then ask again.
	MoveLeadership
	// Refuse: never under this configuration (a cluster too small to lose a
	// member without losing quorum); waiting would not help.
	Refuse
)

func (v Verdict) String() string {
	switch v {
	case Proceed:
		return "proceed"
	case Wait:
		return "wait"
	case MoveLeadership:
		return "move-leadership"
	case Refuse:
		return "refuse"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Decision is a verdict with its reason, for logs and STATUS.
type Decision struct {
	Verdict Verdict
	Reason  string
}

// Policy mirrors the [leader] configuration.
type Policy struct {
	FollowersFirst bool // the leader takes a slot only after the others
	MoveLeader     bool // a leader hands leadership over before rebooting
	RequireQuorum  bool // never reboot while quorum or another member is at risk
	// AllowQuorumLoss lets a member of a 1- or 2-voter cluster reboot
	// although quorum is lost until it is back (etcd.allow_quorum_loss).
	AllowQuorumLoss bool
	MaxLag          uint64
}

// Situation is what the rules look at.
type Situation struct {
	Local  string // local member name; "" when the host runs no member
	Health Health
	// PendingMembers are the members of other nodes of the group that have
	// announced a pending update (announcements of nodes without a member
	// carry no member name and are left out by the caller).
	PendingMembers []string
}

// MayAcquire decides whether this node may queue for a reboot slot now. A
// leader goes last: while other members still have an update pending it
// waits, so that the leadership moves once per rollout, not once per member.
func MayAcquire(p Policy, s Situation) Decision {
	if s.Local == "" {
		return Decision{Proceed, "no local etcd member"}
	}
	if !p.FollowersFirst {
		return Decision{Proceed, "followers_first disabled"}
	}
	if s.Health.LeaderID == 0 {
		return Decision{Wait, "etcd has no leader"}
	}
	lead, _ := s.Health.Leader()
	if lead.Name != s.Local {
		return Decision{Proceed, fmt.Sprintf("local member %s is a follower", s.Local)}
	}
	var others []string
	for _, m := range s.PendingMembers {
		if m != s.Local && m != "" && !slices.Contains(others, m) {
			others = append(others, m)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		return Decision{Wait, fmt.Sprintf("local member %s is the leader; it updates after %s", s.Local, strings.Join(others, ", "))}
	}
	return Decision{Proceed, fmt.Sprintf("local member %s is the leader and the last member with an update pending", s.Local)}
}

// Unannounced names the other voting members of a cluster the local member
// leads that have not announced an update (nil when it does not lead). Next
// to a leader that MayAcquire lets queue, they may simply not have found the
// update yet: the engine gives them a bounded grace to announce
// (leader.followers_grace) before the leader takes a slot. Learners are left
// out: leadership never moves to them.
func Unannounced(s Situation) []string {
	lead, ok := s.Health.Leader()
	if s.Local == "" || !ok || lead.Name != s.Local {
		return nil
	}
	var out []string
	for _, m := range s.Health.Members {
		if m.Name != s.Local && m.Name != "" && !m.Learner && !slices.Contains(s.PendingMembers, m.Name) {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// MayReboot decides, while holding the slot, whether this node may go down
// now: every other member healthy, quorum safe without the local member, and
// leadership moved away first.
//
// A cluster of 1 or 2 voting members loses quorum whenever one of them goes
// down, however healthy it is: waiting cannot make it safe. Such a member is
// refused (Refuse, with the reason) unless AllowQuorumLoss; then only the
// other member's health is required.
func MayReboot(p Policy, s Situation) Decision {
	if s.Local == "" {
		return Decision{Proceed, "no local etcd member"}
	}
	local, ok := s.Health.ByName(s.Local)
	if !ok {
		return Decision{Wait, fmt.Sprintf("local member %s is not in the member list", s.Local)}
	}
	if p.RequireQuorum {
		if v := Voters(s.Health); v <= 2 && !local.Learner && !p.AllowQuorumLoss {
			return Decision{Refuse, fmt.Sprintf("the etcd cluster has %d voting member(s): rebooting %s loses quorum until it is back, "+
				"which no wait can avoid; add members, or set etcd.allow_quorum_loss = true to accept it", v, s.Local)}
		}
		if s.Health.LeaderID == 0 {
			return Decision{Wait, "etcd has no leader"}
		}
		for _, m := range s.Health.Members {
			if m.Name == s.Local || m.Learner {
				continue
			}
			if pr := s.Health.Problem(m, p.MaxLag); pr != "" {
				return Decision{Wait, pr}
			}
		}
		if Voters(s.Health) > 2 || local.Learner {
			if ok, why := QuorumSafeWithout(s.Health, s.Local, p.MaxLag); !ok {
				return Decision{Wait, why}
			}
		}
	}
	if p.MoveLeader && s.Health.LeaderID == local.ID && Voters(s.Health) > 1 {
		return Decision{MoveLeadership, fmt.Sprintf("local member %s is the leader", s.Local)}
	}
	return Decision{Proceed, "other members healthy, quorum safe without " + s.Local}
}

// Voters counts the voting members (learners do not count toward quorum).
func Voters(h Health) int {
	n := 0
	for _, m := range h.Members {
		if !m.Learner {
			n++
		}
	}
	return n
}

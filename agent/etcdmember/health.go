// Package etcdmember knows the etcd cluster the host belongs to: which
// member is local, who leads, whether every member is healthy, whether quorum
// survives this node's reboot, and how to move leadership away first.
//
// The decisions (QuorumSafeWithout, PickTransferee, MayAcquire, MayReboot)
// are pure functions over a Health snapshot; Cluster is the thin adapter that
// takes the snapshot from etcd and carries out MoveLeader.
package etcdmember

import (
	"fmt"
	"sort"
	"strings"
)

// Member is one etcd member as the membership list has it.
type Member struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	ClientURLs []string `json:"client_urls"`
	PeerURLs   []string `json:"peer_urls,omitempty"`
	Learner    bool     `json:"learner,omitempty"`
}

// MemberHealth is a member with what its own Status call said.
type MemberHealth struct {
	Member
	Reachable bool   `json:"reachable"`
	Err       string `json:"error,omitempty"`
	RaftIndex uint64 `json:"raft_index"`
	RaftTerm  uint64 `json:"raft_term"`
	// Leader is the leader this member believes in (0: none).
	Leader uint64 `json:"leader"`
	// Alarms are active alarms reported by the member (NOSPACE, CORRUPT).
	Alarms []string `json:"alarms,omitempty"`
}

// Health is one snapshot of the whole cluster.
type Health struct {
	Members []MemberHealth `json:"members"`
	// LeaderID is the member that reachable members agree leads, and that
	// itself says it leads; 0 when there is none.
	LeaderID uint64 `json:"leader_id"`
}

// Summarize fills LeaderID from the members' answers: a member leads when it
// says so itself (Header.MemberId == Leader) and no reachable member's
// newer term names someone else.
func Summarize(members []MemberHealth) Health {
	h := Health{Members: members}
	var bestTerm uint64
	for _, m := range members {
		if m.Reachable && m.Leader == m.ID && m.RaftTerm >= bestTerm {
			h.LeaderID, bestTerm = m.ID, m.RaftTerm
		}
	}
	for _, m := range members {
		if m.Reachable && m.RaftTerm > bestTerm {
			h.LeaderID = 0 // a newer term exists whose leader did not answer
		}
	}
	return h
}

// ByName returns the member called name.
func (h Health) ByName(name string) (MemberHealth, bool) {
	for _, m := range h.Members {
		if m.Name == name {
			return m, true
		}
	}
	return MemberHealth{}, false
}

// Leader returns the leading member.
func (h Health) Leader() (MemberHealth, bool) {
	for _, m := range h.Members {
		if h.LeaderID != 0 && m.ID == h.LeaderID {
			return m, true
		}
	}
	return MemberHealth{}, false
}

// Lag is how many raft entries m is behind the most advanced member.
func (h Health) Lag(m MemberHealth) uint64 {
	var top uint64
	for _, o := range h.Members {
		if o.Reachable && o.RaftIndex > top {
			top = o.RaftIndex
		}
	}
	if m.RaftIndex >= top {
		return 0
	}
	return top - m.RaftIndex
}

// Problem says why m is unhealthy, or "" when it is healthy: reachable, no
// alarm, following the cluster's leader, at most maxLag entries behind.
func (h Health) Problem(m MemberHealth, maxLag uint64) string {
	switch {
	case !m.Reachable:
		if m.Err != "" {
			return fmt.Sprintf("member %s unreachable: %s", m.Name, m.Err)
		}
		return fmt.Sprintf("member %s unreachable", m.Name)
	case len(m.Alarms) > 0:
		return fmt.Sprintf("member %s has alarms %s", m.Name, strings.Join(m.Alarms, ","))
	case m.Leader == 0 || (h.LeaderID != 0 && m.Leader != h.LeaderID):
		return fmt.Sprintf("member %s does not follow the leader", m.Name)
	case h.Lag(m) > maxLag:
		return fmt.Sprintf("member %s is %d raft entries behind (limit %d)", m.Name, h.Lag(m), maxLag)
	}
	return ""
}

// QuorumSafeWithout says whether the voting members other than the one
// named down, counting only healthy ones, still form a quorum of all voters.
func QuorumSafeWithout(h Health, down string, maxLag uint64) (bool, string) {
	voters, healthy := 0, 0
	var sick []string
	for _, m := range h.Members {
		if m.Learner {
			continue
		}
		voters++
		if m.Name == down {
			continue
		}
		if p := h.Problem(m, maxLag); p != "" {
			sick = append(sick, p)
			continue
		}
		healthy++
	}
	need := voters/2 + 1
	if healthy >= need {
		return true, ""
	}
	reason := fmt.Sprintf("with %s down only %d of %d voting members would be healthy; quorum needs %d", down, healthy, voters, need)
	if len(sick) > 0 {
		reason += " (" + strings.Join(sick, "; ") + ")"
	}
	return false, reason
}

// PickTransferee chooses who should lead instead of member from: a healthy
// voter, preferring one prefer says is already on the target version (so a
// rollout changes leader once), then the least lagging, then by name.
func PickTransferee(h Health, from string, maxLag uint64, prefer func(name string) bool) (MemberHealth, bool) {
	var cands []MemberHealth
	for _, m := range h.Members {
		if m.Learner || m.Name == from || h.Problem(m, maxLag) != "" {
			continue
		}
		cands = append(cands, m)
	}
	if len(cands) == 0 {
		return MemberHealth{}, false
	}
	pref := func(m MemberHealth) bool { return prefer != nil && prefer(m.Name) }
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if pref(a) != pref(b) {
			return pref(a)
		}
		if h.Lag(a) != h.Lag(b) {
			return h.Lag(a) < h.Lag(b)
		}
		return a.Name < b.Name
	})
	return cands[0], true
}

package etcdmember

import (
	"strings"
	"testing"
)

// cluster builds a health snapshot: names a, b, c, ... with IDs 1, 2, 3; lead
// is the leader's index (-1: none); down lists unreachable indexes.
func cluster(n, lead int, down ...int) Health {
	var ms []MemberHealth
	for i := 0; i < n; i++ {
		m := MemberHealth{Member: Member{ID: uint64(i + 1), Name: string(rune('a' + i))},
			Reachable: true, RaftIndex: 100, RaftTerm: 5}
		if lead >= 0 {
			m.Leader = uint64(lead + 1)
		}
		for _, d := range down {
			if d == i {
				m = MemberHealth{Member: m.Member, Err: "connection refused"}
			}
		}
		ms = append(ms, m)
	}
	return Summarize(ms)
}

func TestSummarize(t *testing.T) {
	h := cluster(3, 1)
	if h.LeaderID != 2 {
		t.Errorf("leader %d, want 2", h.LeaderID)
	}
	if h := cluster(3, 1, 1); h.LeaderID != 0 {
		t.Errorf("unreachable leader counted: %d", h.LeaderID)
	}
	// A member in a newer term means the old leader's claim is stale.
	h = cluster(3, 0)
	h.Members[2].RaftTerm, h.Members[2].Leader = 6, 0
	if s := Summarize(h.Members); s.LeaderID != 0 {
		t.Errorf("stale leader %d accepted", s.LeaderID)
	}
}

func TestQuorumSafeWithout(t *testing.T) {
	lagging := cluster(3, 0)
	lagging.Members[2].RaftIndex = 10
	learner := cluster(4, 0)
	learner.Members[3].Learner = true
	learner.Members[3].Reachable = false
	tests := []struct {
		name string
		h    Health
		down string
		ok   bool
		why  string
	}{
		{"3 healthy, one goes", cluster(3, 0), "b", true, ""},
		{"3 with one already down", cluster(3, 0, 2), "b", false, "only 1 of 3"},
		{"the down one itself may go", cluster(3, 0, 2), "c", true, ""},
		{"lagging member does not count", lagging, "b", false, "behind"},
		{"5 with one down", cluster(5, 0, 4), "b", true, ""},
		{"5 with two down", cluster(5, 0, 3, 4), "b", false, "quorum needs 3"},
		{"learners do not vote", learner, "b", true, ""},
		{"single member", cluster(1, 0), "a", false, "only 0 of 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := QuorumSafeWithout(tt.h, tt.down, 50)
			if ok != tt.ok || !strings.Contains(why, tt.why) {
				t.Errorf("QuorumSafeWithout(%s) = %v, %q; want %v, containing %q", tt.down, ok, why, tt.ok, tt.why)
			}
		})
	}
}

func TestPickTransferee(t *testing.T) {
	lag := cluster(3, 0)
	lag.Members[1].RaftIndex = 95
	tests := []struct {
		name   string
		h      Health
		prefer []string
		want   string
	}{
		{"least lag then name", cluster(3, 0), nil, "b"},
		{"prefer updated follower", cluster(3, 0), []string{"c"}, "c"},
		{"lagging one loses", lag, nil, "c"},
		{"preference beats lag", lag, []string{"b"}, "b"},
		{"unreachable skipped even if preferred", cluster(3, 0, 2), []string{"c"}, "b"},
		{"nobody", cluster(3, 0, 1, 2), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefer := func(n string) bool { return strings.Contains(strings.Join(tt.prefer, ","), n) }
			got, ok := PickTransferee(tt.h, "a", 50, prefer)
			if got.Name != tt.want || ok != (tt.want != "") {
				t.Errorf("PickTransferee = %q, %v; want %q", got.Name, ok, tt.want)
			}
		})
	}
}

func TestMayAcquire(t *testing.T) {
	all := Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true, MaxLag: 50}
	tests := []struct {
		name    string
		p       Policy
		s       Situation
		verdict Verdict
		why     string
	}{
		{"worker", all, Situation{Local: "", Health: cluster(3, 0)}, Proceed, "no local"},
		{"follower goes", all, Situation{Local: "b", Health: cluster(3, 0), PendingMembers: []string{"a", "c"}}, Proceed, "follower"},
		{"leader waits for others", all, Situation{Local: "a", Health: cluster(3, 0), PendingMembers: []string{"c", "a", "b", "c"}}, Wait, "after b, c"},
		{"leader last", all, Situation{Local: "a", Health: cluster(3, 0), PendingMembers: []string{"a"}}, Proceed, "last"},
		{"hosts without a member do not hold the leader back", all, Situation{Local: "a", Health: cluster(3, 0), PendingMembers: []string{"", ""}}, Proceed, "last"},
		{"follower while another follower is pending", all, Situation{Local: "c", Health: cluster(3, 0), PendingMembers: []string{"b"}}, Proceed, "follower"},
		// The engine used to queue here; queueing now could put a node
		// that is about to lead ahead of its followers.
		{"no leader", all, Situation{Local: "a", Health: cluster(3, -1)}, Wait, "no leader"},
		{"rule disabled", Policy{}, Situation{Local: "a", Health: cluster(3, 0), PendingMembers: []string{"b"}}, Proceed, "disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := MayAcquire(tt.p, tt.s)
			if d.Verdict != tt.verdict || !strings.Contains(d.Reason, tt.why) {
				t.Errorf("MayAcquire = %v %q; want %v containing %q", d.Verdict, d.Reason, tt.verdict, tt.why)
			}
		})
	}
}

func TestUnannounced(t *testing.T) {
	learner := cluster(4, 0)
	learner.Members[3].Learner = true
	tests := []struct {
		name string
		s    Situation
		want string
	}{
		{"leader, nobody announced", Situation{Local: "a", Health: cluster(3, 0)}, "b c"},
		{"leader, one announced", Situation{Local: "a", Health: cluster(3, 0), PendingMembers: []string{"c", "a"}}, "b"},
		{"leader, all announced", Situation{Local: "a", Health: cluster(3, 0), PendingMembers: []string{"b", "c"}}, ""},
		{"learners never lead: not waited for", Situation{Local: "a", Health: learner}, "b c"},
		{"a down member has not announced either", Situation{Local: "a", Health: cluster(3, 0, 2)}, "b c"},
		{"follower", Situation{Local: "b", Health: cluster(3, 0)}, ""},
		{"no leader", Situation{Local: "a", Health: cluster(3, -1)}, ""},
		{"worker", Situation{Health: cluster(3, 0)}, ""},
		{"single member", Situation{Local: "a", Health: cluster(1, 0)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(Unannounced(tt.s), " "); got != tt.want {
				t.Errorf("Unannounced = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMayReboot(t *testing.T) {
	all := Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true, MaxLag: 50}
	allowLoss := all
	allowLoss.AllowQuorumLoss = true
	tests := []struct {
		name    string
		p       Policy
		s       Situation
		verdict Verdict
		why     string
	}{
		{"healthy follower", all, Situation{Local: "b", Health: cluster(3, 0)}, Proceed, "quorum safe"},
		{"leader must move", all, Situation{Local: "a", Health: cluster(3, 0)}, MoveLeadership, "is the leader"},
		{"leader, moving disabled", Policy{RequireQuorum: true}, Situation{Local: "a", Health: cluster(3, 0)}, Proceed, ""},
		{"another member down", all, Situation{Local: "b", Health: cluster(3, 0, 2)}, Wait, "member c unreachable"},
		{"leader with another down still waits", all, Situation{Local: "a", Health: cluster(3, 0, 2)}, Wait, "unreachable"},
		{"no leader", all, Situation{Local: "b", Health: cluster(3, -1)}, Wait, "no leader"},
		{"unknown local", all, Situation{Local: "x", Health: cluster(3, 0)}, Wait, "not in the member list"},
		{"quorum check disabled", Policy{}, Situation{Local: "b", Health: cluster(3, 0, 2)}, Proceed, ""},
		{"worker", all, Situation{Health: cluster(3, 0, 1, 2)}, Proceed, "no local"},
		// 1- and 2-member clusters lose quorum whatever the wait.
		{"single member: refused", all, Situation{Local: "a", Health: cluster(1, 0)}, Refuse, "etcd.allow_quorum_loss"},
		{"two members, healthy peer: refused", all, Situation{Local: "b", Health: cluster(2, 0)}, Refuse, "2 voting member(s)"},
		{"two members, peer down: still refused, not waiting", all, Situation{Local: "b", Health: cluster(2, 0, 0)}, Refuse, "loses quorum"},
		{"single member allowed: no leader to move", allowLoss, Situation{Local: "a", Health: cluster(1, 0)}, Proceed, ""},
		{"two members allowed: follower goes", allowLoss, Situation{Local: "b", Health: cluster(2, 0)}, Proceed, ""},
		{"two members allowed: leader moves first", allowLoss, Situation{Local: "a", Health: cluster(2, 0)}, MoveLeadership, ""},
		{"two members allowed: peer down, wait", allowLoss, Situation{Local: "a", Health: cluster(2, 0, 1)}, Wait, "member b unreachable"},
		{"two members, quorum check disabled", Policy{}, Situation{Local: "a", Health: cluster(2, 0)}, Proceed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := MayReboot(tt.p, tt.s)
			if d.Verdict != tt.verdict || !strings.Contains(d.Reason, tt.why) {
				t.Errorf("MayReboot = %v %q; want %v containing %q", d.Verdict, d.Reason, tt.verdict, tt.why)
			}
		})
	}
}

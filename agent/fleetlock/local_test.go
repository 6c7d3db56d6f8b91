package fleetlock

import (
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/etcdmember"
)

func TestLocalClient(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef"
	proxies := addrs("127.0.0.5")
	for _, tc := range []struct {
		name, nodeID, id, addr string
		want                   bool
		why                    string
	}{
		{"own zincati over IPv4 loopback", id, id, "127.0.0.1", true, ""},
		{"own zincati over IPv6 loopback", id, id, "::1", true, ""},
		{"IPv4-mapped loopback", id, id, "::ffff:127.0.0.1", true, ""},
		{"the id in upper case", id, strings.ToUpper(id), "127.0.0.1", true, ""},
		{"another host with this host's id", id, id, "10.0.0.2", false, "loopback"},
		{"this host with another id", id, "fedcba9876543210fedcba9876543210", "127.0.0.1", false, "not this host's zincati id"},
		{"a proxy on loopback forwards others", id, id, "127.0.0.5", false, "proxy"},
		{"no id known", "", "", "127.0.0.1", false, "not known"},
		{"an address that is not one", id, id, "local", false, "loopback"},
	} {
		got, why := LocalClient(tc.nodeID, tc.id, Client{Addr: tc.addr}, proxies)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: got %v %q, want %v %q", tc.name, got, why, tc.want, tc.why)
		}
	}
}

func TestMemberAnswer(t *testing.T) {
	for _, tc := range []struct {
		d    etcdmember.Decision
		kind Kind // "" for a grant
		with string
	}{
		{etcdmember.Decision{Verdict: etcdmember.Proceed, Reason: "ok"}, "", ""},
		{etcdmember.Decision{Verdict: etcdmember.Wait, Reason: "member m2 unreachable"}, KindMemberUnsafe, "m2 unreachable; slots kept"},
		{etcdmember.Decision{Verdict: etcdmember.Refuse, Reason: "1 voting member"}, KindMemberUnsafe, "may not reboot: 1 voting"},
		// Never granted without the move.
		{etcdmember.Decision{Verdict: etcdmember.MoveLeadership, Reason: "leads"}, KindMemberUnsafe, "leads"},
	} {
		e := MemberAnswer("m1", tc.d)
		switch {
		case tc.kind == "" && e != nil:
			t.Errorf("%v: got %v, want a grant", tc.d, e)
		case tc.kind != "" && (e == nil || e.Kind != tc.kind || !strings.Contains(e.Value, tc.with)):
			t.Errorf("%v: got %v, want %s with %q", tc.d, e, tc.kind, tc.with)
		}
	}
}

func TestSteadyAnswer(t *testing.T) {
	for _, tc := range []struct {
		listed  bool
		problem string
		release bool
	}{
		{true, "", true},
		{true, "member m1 is 5000 raft entries behind (limit 1000)", false},
		{true, "member m1 unreachable", false},
		{false, "", false},
	} {
		e := SteadyAnswer("m1", tc.listed, tc.problem)
		if (e == nil) != tc.release || (e != nil && (e.Kind != KindMemberUnsafe || !strings.Contains(e.Value, tc.problem))) {
			t.Errorf("listed %v, problem %q: got %v, want release %v", tc.listed, tc.problem, e, tc.release)
		}
	}
}

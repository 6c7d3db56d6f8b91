package etcdmember

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func addrs(s ...string) []HostAddr {
	var out []HostAddr
	for i := 0; i+1 < len(s); i += 2 {
		out = append(out, HostAddr{IP: netip.MustParseAddr(s[i]), Iface: s[i+1]})
	}
	return out
}

// The shipped control-plane example: members advertise their own addresses.
var threeNode = []Member{
	{ID: 1, Name: "cp1", ClientURLs: []string{"https://10.0.0.11:2379"}, PeerURLs: []string{"https://10.0.0.11:2380"}},
	{ID: 2, Name: "cp2", ClientURLs: []string{"https://10.0.0.12:2379"}, PeerURLs: []string{"https://10.0.0.12:2380"}},
	{ID: 3, Name: "cp3", ClientURLs: []string{"https://10.0.0.13:2379"}, PeerURLs: []string{"https://10.0.0.13:2380"}},
}

func TestMatchLocal(t *testing.T) {
	lo := addrs("127.0.0.1", "lo", "::1", "lo")
	withLo := func(a ...string) []HostAddr { return append(addrs(a...), lo...) }
	unstarted := append(threeNode[:2:2], Member{ID: 0xabc, PeerURLs: []string{"https://10.0.0.13:2380"}})
	loopbackAll := []Member{
		{ID: 1, Name: "m0", ClientURLs: []string{"http://127.0.0.1:2379"}, PeerURLs: []string{"http://127.0.0.1:2380"}},
		{ID: 2, Name: "m1", ClientURLs: []string{"http://127.0.0.1:3379"}, PeerURLs: []string{"http://127.0.0.1:3380"}},
	}
	dnsNamed := []Member{
		{ID: 1, Name: "cp1", ClientURLs: []string{"https://etcd-1.cluster.internal:2379"}, PeerURLs: []string{"https://etcd-1.cluster.internal:2380"}},
		{ID: 2, Name: "cp2", ClientURLs: []string{"https://etcd-2.cluster.internal:2379"}, PeerURLs: []string{"https://etcd-2.cluster.internal:2380"}},
		{ID: 3, Name: "cp3", ClientURLs: []string{"https://etcd-3.cluster.internal:2379"}, PeerURLs: []string{"https://ETCD-3.cluster.internal.:2380"}},
	}
	resolvedAll := []Resolution{
		{Name: "etcd-1.cluster.internal", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.11")}},
		{Name: "etcd-2.cluster.internal", Addrs: []netip.Addr{netip.MustParseAddr("fd00::12"), netip.MustParseAddr("10.0.0.12")}},
		{Name: "etcd-3.cluster.internal", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.13")}},
	}
	oneUnresolved := append(resolvedAll[:2:2], Resolution{Name: "etcd-3.cluster.internal",
		Err: errors.New("resolving etcd-3.cluster.internal: lookup etcd-3.cluster.internal: no such host")})
	for _, tc := range []struct {
		name    string
		members []Member
		host    Host
		want    string // member name, "" = worker
		how     string // in How, or in the error when wantErr
		wantErr bool
	}{
		{name: "peer and client URL on eth0", members: threeNode,
			host: Host{Addrs: withLo("10.0.0.11", "eth0"), Hostname: "cp1", LocalUnit: "etcd.service"},
			want: "cp1", how: "member cp1: peer URL https://10.0.0.11:2380 matches 10.0.0.11 on eth0"},
		{name: "second address on another interface", members: threeNode,
			host: Host{Addrs: withLo("192.168.1.5", "eth0", "10.0.0.12", "eth1")},
			want: "cp2", how: "10.0.0.12 on eth1"},
		{name: "IPv6 member", members: []Member{{ID: 7, Name: "v6", PeerURLs: []string{"https://[fd00::7]:2380"}}},
			host: Host{Addrs: withLo("fd00::7", "eth0")}, want: "v6", how: "fd00::7 on eth0"},
		{name: "DNS name in the peer URL", members: []Member{
			{ID: 1, Name: "etcd-a", PeerURLs: []string{"https://cp1.example.com:2380"}},
			{ID: 2, Name: "etcd-b", PeerURLs: []string{"https://cp2.example.com:2380"}}},
			host: Host{Addrs: withLo("10.9.9.9", "eth0"), Hostname: "cp2"}, want: "etcd-b", how: "names host cp2"},
		{name: "DNS names resolved to an own address", members: dnsNamed,
			host: Host{Addrs: withLo("10.0.0.12", "eth0"), Hostname: "node-b", Resolved: resolvedAll},
			want: "cp2", how: "member cp2: peer URL https://etcd-2.cluster.internal:2380: etcd-2.cluster.internal resolves to fd00::12 10.0.0.12, which matches 10.0.0.12 on eth0"},
		{name: "DNS names, a trailing dot and upper case", members: dnsNamed,
			host: Host{Addrs: withLo("10.0.0.13", "eth0"), Resolved: resolvedAll}, want: "cp3", how: "etcd-3.cluster.internal resolves to 10.0.0.13"},
		{name: "DNS names resolved, none to this host: a worker, saying what resolved", members: dnsNamed,
			host: Host{Addrs: withLo("10.0.0.21", "eth0"), Hostname: "w1", Resolved: resolvedAll},
			how:  "a worker: no etcd member's peer or client URLs match this host (addresses 10.0.0.21 on eth0, host name w1; resolved etcd-1.cluster.internal is 10.0.0.11, etcd-2.cluster.internal is fd00::12 10.0.0.12, etcd-3.cluster.internal is 10.0.0.13)"},
		{name: "a name that does not resolve is an error, not a worker", members: dnsNamed,
			host:    Host{Addrs: withLo("10.0.0.13", "eth0"), Hostname: "cp3", Resolved: oneUnresolved},
			wantErr: true, how: "did not resolve: resolving etcd-3.cluster.internal: lookup etcd-3.cluster.internal: no such host; no member matches this host (addresses 10.0.0.13 on eth0, host name cp3; resolved etcd-1.cluster.internal is 10.0.0.11"},
		{name: "a name not looked up is an error", members: dnsNamed,
			host: Host{Addrs: withLo("10.0.0.21", "eth0")}, wantErr: true, how: "etcd-1.cluster.internal (not looked up)"},
		{name: "an unresolved name of another member does not hide strong evidence", members: dnsNamed,
			host: Host{Addrs: withLo("10.0.0.11", "eth0"), Resolved: oneUnresolved}, want: "cp1", how: "etcd-1.cluster.internal resolves to 10.0.0.11"},
		{name: "a name resolving to loopback is loopback evidence", members: dnsNamed[:1],
			host: Host{Addrs: lo, Resolved: []Resolution{{Name: "etcd-1.cluster.internal", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}}},
			want: "cp1", how: "resolves to 127.0.0.1, which matches 127.0.0.1 on lo"},
		{name: "worker", members: threeNode, host: Host{Addrs: withLo("10.0.0.21", "eth0"), Hostname: "w1"},
			how: "a worker: no etcd member's peer or client URLs match this host (addresses 10.0.0.21 on eth0, host name w1)"},
		{name: "worker with many interfaces", members: threeNode,
			host: Host{Addrs: withLo("fe80::1", "eth0", "10.0.0.21", "eth0", "10.1.0.1", "cni0", "10.1.0.2", "cni1",
				"10.1.0.3", "cni2", "10.1.0.4", "cni3", "10.1.0.5", "cni4", "10.1.0.6", "cni5", "10.1.0.7", "cni6")},
			how: "(addresses 10.0.0.21 on eth0, 10.1.0.1 on cni0, 10.1.0.2 on cni1, 10.1.0.3 on cni2, 10.1.0.4 on cni3, 10.1.0.5 on cni4, 2 more)"},
		{name: "local_unit set, no member matches", members: threeNode,
			host:    Host{Addrs: withLo("10.0.0.14", "eth0"), LocalUnit: "etcd.service"},
			wantErr: true, how: "etcd.local_unit = etcd.service says this host runs an etcd member"},
		{name: "local_process set, no member matches", members: threeNode,
			host:    Host{Addrs: withLo("10.0.0.14", "eth0"), LocalProcess: "etcd"},
			wantErr: true, how: "etcd.local_process = etcd says this host runs an etcd member"},
		{name: "own address in the peer URL of a member not started", members: unstarted,
			host:    Host{Addrs: withLo("10.0.0.13", "eth0")},
			wantErr: true, how: "etcd member abc matches this host (peer URL https://10.0.0.13:2380 matches 10.0.0.13 on eth0) but has not started"},
		{name: "two members on this host", members: threeNode,
			host:    Host{Addrs: withLo("10.0.0.11", "eth0", "10.0.0.12", "eth0")},
			wantErr: true, how: "several etcd members: cp1"},
		{name: "one-member cluster on loopback", members: loopbackAll[:1],
			host: Host{Addrs: lo}, want: "m0", how: "member m0: peer URL http://127.0.0.1:2380 matches 127.0.0.1 on lo"},
		{name: "localhost", members: []Member{{ID: 1, Name: "solo", ClientURLs: []string{"http://localhost:2379"}}},
			host: Host{Addrs: lo}, want: "solo", how: "is localhost"},
		{name: "several members on loopback are no evidence", members: loopbackAll,
			host: Host{Addrs: lo}, how: "m0 (peer URL http://127.0.0.1:2380 matches 127.0.0.1 on lo), m1 (peer URL http://127.0.0.1:3380 matches 127.0.0.1 on lo) are on loopback everywhere"},
		{name: "the local unit's listener picks one of several on loopback", members: loopbackAll,
			host: Host{Addrs: lo, LocalUnit: "etcd.service", Listeners: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3380")}},
			want: "m1", how: "member m1: peer URL http://127.0.0.1:3380: etcd.service listens on 127.0.0.1:3380"},
		{name: "the local process's listener picks one of several on loopback", members: loopbackAll,
			host: Host{Addrs: lo, LocalProcess: "etcd", Listeners: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3380")}},
			want: "m1", how: "member m1: peer URL http://127.0.0.1:3380: etcd listens on 127.0.0.1:3380"},
		{name: "the local unit on a wildcard address, member URL on an own address", members: threeNode,
			host: Host{Addrs: withLo("10.0.0.12", "eth0"), LocalUnit: "etcd.service", Listeners: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:2380")}},
			want: "cp2", how: "member cp2: peer URL https://10.0.0.12:2380 matches 10.0.0.12 on eth0"},
		{name: "a wildcard listener alone says nothing of other hosts' URLs", members: threeNode,
			host:    Host{Addrs: withLo("10.0.0.21", "eth0"), LocalUnit: "etcd.service", Listeners: []netip.AddrPort{netip.MustParseAddrPort("[::]:2380")}},
			wantErr: true, how: "etcd.local_unit = etcd.service says"},
		{name: "every member advertises the same loopback URL the unit listens on", members: []Member{
			{ID: 1, Name: "cp1", ClientURLs: []string{"https://10.0.0.11:2379", "https://127.0.0.1:2379"}},
			{ID: 2, Name: "cp2", ClientURLs: []string{"https://10.0.0.12:2379", "https://127.0.0.1:2379"}}},
			host: Host{Addrs: withLo("10.0.0.12", "eth0"), LocalUnit: "etcd.service", Listeners: []netip.AddrPort{
				netip.MustParseAddrPort("127.0.0.1:2379"), netip.MustParseAddrPort("10.0.0.12:2379")}},
			want: "cp2", how: "member cp2: client URL https://10.0.0.12:2379 matches 10.0.0.12 on eth0"},
		{name: "a local endpoint answers for one of them", members: loopbackAll,
			host: Host{Addrs: lo, Served: []Served{{Endpoint: "http://127.0.0.1:3379", MemberID: 2}}},
			want: "m1", how: "member m1: serves local endpoint http://127.0.0.1:3379"},
		{name: "a local endpoint down, nothing else", members: threeNode,
			host:    Host{Addrs: withLo("10.0.0.21", "eth0"), ServeErrs: []error{errors.New("status of http://127.0.0.1:2379: refused")}},
			wantErr: true, how: "local endpoints did not answer: status of http://127.0.0.1:2379: refused"},
		{name: "a local endpoint down, own address still decides", members: threeNode,
			host: Host{Addrs: withLo("10.0.0.13", "eth0"), ServeErrs: []error{errors.New("refused")}}, want: "cp3"},
		{name: "unspecified and unparsable URLs never match", members: []Member{
			{ID: 1, Name: "x", ClientURLs: []string{"http://0.0.0.0:2379", "::bad"}}},
			host: Host{Addrs: addrs("0.0.0.0", "eth0")}, how: "a worker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := MatchLocal(tc.members, tc.host)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.how) {
					t.Fatalf("MatchLocal = %+v, %v; want an error with %q", m, err, tc.how)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Found != (tc.want != "") || m.Member.Name != tc.want || !strings.Contains(m.How, tc.how) {
				t.Errorf("MatchLocal = found %v %q, how %q; want %q, how with %q", m.Found, m.Member.Name, m.How, tc.want, tc.how)
			}
		})
	}
}

func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"cp1", "cp1", true}, {"CP1.example.com.", "cp1.example.com", true}, {"cp1", "cp1.example.com", true},
		{"cp1.a.com", "cp1.b.com", false}, {"cp1", "cp10", false}, {"", "", false}, {"cp1", "", false},
	} {
		if got := sameHost(tc.a, tc.b); got != tc.want {
			t.Errorf("sameHost(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

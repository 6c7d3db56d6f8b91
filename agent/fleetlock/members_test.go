package fleetlock

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/etcdmember"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestMemberOf(t *testing.T) {
	ms := []Member{
		{Name: "cp1", PeerURLs: []string{"https://10.0.0.1:2380"}, ClientURLs: []string{"https://10.0.0.1:2379"}},
		{Name: "cp2", PeerURLs: []string{"https://etcd-2.example:2380"}, ClientURLs: []string{"https://[fd00::2]:2379"}},
		{Name: "", PeerURLs: []string{"https://10.0.0.3:2380"}}, // not started yet
		// Multi-homed and dual-stack behind one name, with a trailing dot.
		{Name: "cp4", PeerURLs: []string{"https://ETCD-4.example.:2380"}, ClientURLs: []string{"https://0.0.0.0:2379"}},
	}
	resolved := []etcdmember.Resolution{
		{Name: "etcd-2.example", Addrs: addrs("10.0.0.2")},
		{Name: "etcd-4.example", Addrs: addrs("10.0.0.4", "10.1.0.4", "fd00::4", "0.0.0.0")},
	}
	v := MemberView{Members: ms, Resolved: resolved}
	for _, tc := range []struct {
		id, addr, want string
	}{
		{"worker-1", "10.0.0.9", ""},
		{"cp1", "10.0.0.9", "cp1"},
		{"CP1", "10.0.0.9", "cp1"},
		{"worker-1", "10.0.0.1", "cp1"},
		{"etcd-2.example", "10.0.0.9", "cp2"},
		{"worker-1", "fd00::2", "cp2"},
		{"worker-1", "::ffff:10.0.0.1", "cp1"},
		{"worker-1", "10.0.0.3", "https://10.0.0.3:2380"},
		// The addresses behind the names.
		{"worker-1", "10.0.0.2", "cp2"},
		{"worker-1", "::ffff:10.0.0.2", "cp2"},
		{"worker-1", "10.0.0.4", "cp4"},
		{"worker-1", "10.1.0.4", "cp4"},
		{"worker-1", "fd00::4", "cp4"},
		{"worker-1", "fd00::4%eth0", "cp4"},
		// An unspecified address in a URL or a resolution is nobody's.
		{"worker-1", "0.0.0.0", ""},
	} {
		if got, err := v.MemberOf(tc.id, tc.addr); got != tc.want || err != nil {
			t.Errorf("%s from %s: got %q, %v; want %q", tc.id, tc.addr, got, err, tc.want)
		}
	}

	// localhost is every loopback address.
	local := MemberView{Members: []Member{{Name: "solo", ClientURLs: []string{"http://localhost:2379"}}}}
	for addr, want := range map[string]string{"127.0.0.1": "solo", "::1": "solo", "10.0.0.9": ""} {
		if got, err := local.MemberOf("w", addr); got != want || err != nil {
			t.Errorf("localhost member, client %s: got %q, %v; want %q", addr, got, err, want)
		}
	}
}

// TestMemberOfUnresolved: a member name that did not resolve, or was not
// looked up, refuses every client no other member matches: it may be
// behind that name.
func TestMemberOfUnresolved(t *testing.T) {
	ms := []Member{
		{Name: "cp1", PeerURLs: []string{"https://10.0.0.1:2380"}},
		{Name: "cp2", PeerURLs: []string{"https://etcd-2.example:2380"}},
		{Name: "cp3", PeerURLs: []string{"https://etcd-3.example:2380"}},
	}
	for _, tc := range []struct {
		name     string
		resolved []etcdmember.Resolution
		id, addr string
		member   string
		err      string
	}{
		{"a name does not resolve", []etcdmember.Resolution{
			{Name: "etcd-2.example", Err: errors.New("resolving etcd-2.example: no such host")},
			{Name: "etcd-3.example", Addrs: addrs("10.0.0.3")},
		}, "worker-1", "10.0.0.9", "", "did not resolve: resolving etcd-2.example: no such host"},
		{"a name not looked up", []etcdmember.Resolution{
			{Name: "etcd-2.example", Addrs: addrs("10.0.0.2")},
		}, "worker-1", "10.0.0.9", "", "etcd-3.example (not looked up)"},
		{"another member matches", []etcdmember.Resolution{
			{Name: "etcd-2.example", Err: errors.New("resolving etcd-2.example: timeout")},
			{Name: "etcd-3.example", Addrs: addrs("10.0.0.3")},
		}, "worker-1", "10.0.0.3", "cp3", ""},
		{"the id names a member", nil, "cp2", "10.0.0.9", "cp2", ""},
		{"an address that is not one", nil, "worker-1", "not-an-ip", "", ""},
	} {
		got, err := MemberView{Members: ms, Resolved: tc.resolved}.MemberOf(tc.id, tc.addr)
		if got != tc.member || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: got %q, %v; want %q, error with %q", tc.name, got, err, tc.member, tc.err)
		}
	}
}

func TestMemberAddr(t *testing.T) {
	proxies := addrs("10.0.0.1", "fd00::1")
	for _, tc := range []struct{ addr, want string }{
		{"10.0.0.9", "10.0.0.9"},
		{"10.0.0.1", ""},
		{"::ffff:10.0.0.1", ""},
		{"fd00::1%eth0", ""},
		{"fd00::2", "fd00::2"},
		{"not-an-ip", "not-an-ip"},
	} {
		if got := MemberAddr(tc.addr, proxies); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.addr, got, tc.want)
		}
	}
	if got := MemberAddr("10.0.0.1", nil); got != "10.0.0.1" {
		t.Errorf("no proxies: got %q", got)
	}
}

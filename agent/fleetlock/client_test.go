package fleetlock

import (
	"net/netip"
	"testing"
)

func TestOwns(t *testing.T) {
	addr := &Client{Addr: "10.0.0.5"}
	cert := &Client{Addr: "10.0.0.5", Cert: "CN=worker-1"}
	for _, tc := range []struct {
		name  string
		owner *Client
		req   Client
		want  bool
	}{
		{"entry of an older server", nil, Client{Addr: "10.0.0.9"}, true},
		{"same address (a rebooted node)", addr, Client{Addr: "10.0.0.5"}, true},
		{"another address", addr, Client{Addr: "10.0.0.9"}, false},
		{"same certificate, new address", cert, Client{Addr: "10.0.0.9", Cert: "CN=worker-1"}, true},
		{"same address, no certificate", cert, Client{Addr: "10.0.0.5"}, false},
		{"same address, another certificate", cert, Client{Addr: "10.0.0.5", Cert: "CN=worker-2"}, false},
		{"owner without address", &Client{}, Client{}, false},
	} {
		if got := Owns(tc.owner, tc.req); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAdmits(t *testing.T) {
	a := Allow{IDs: []string{"w1"}, Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")}}
	for _, tc := range []struct {
		allow    Allow
		id, addr string
		ok       bool
	}{
		{Allow{}, "any", "192.0.2.1", true},
		{a, "w1", "10.0.0.7", true},
		{a, "w1", "::ffff:10.0.0.7", true},
		{a, "w1", "fd00::7", true},
		{a, "w2", "10.0.0.7", false},
		{a, "w1", "10.0.1.7", false},
		{a, "w1", "not-an-ip", false},
		{Allow{IDs: []string{"w1"}}, "w1", "192.0.2.1", true},
	} {
		if why := tc.allow.Admits(tc.id, tc.addr); (why == "") != tc.ok {
			t.Errorf("%+v %s %s: %q, want ok=%v", tc.allow, tc.id, tc.addr, why, tc.ok)
		}
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8443": true, "[::1]:8443": true, "localhost:8443": true,
		":8443": false, "0.0.0.0:8443": false, "[::]:8443": false, "10.0.0.1:8443": false, "cp1:8443": false, "x": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("%s: got %v, want %v", addr, got, want)
		}
	}
}

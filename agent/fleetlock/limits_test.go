package fleetlock_test

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/fleetlock"
)

// TestRateLimitPerAddress: an address past its burst gets 429 with the
// FleetLock error shape, before any etcd work; other addresses are not
// affected, and its tokens come back with time.
func TestRateLimitPerAddress(t *testing.T) {
	f := newFixture(t, 1)
	o := f.opts(2)
	o.Rate = fleetlock.Rate{Burst: 2, Every: 10 * time.Second}
	m := o.Metrics.(*counts)
	_, hs := f.server(o)
	pre, steady := fleetlock.PathPreReboot, fleetlock.PathSteadyState
	for i := range 2 {
		if a := postFrom(t, "127.0.0.21", hs.URL, pre, "a", "default"); !a.ok() {
			t.Fatalf("request %d within the burst: %+v", i+1, a)
		}
	}
	for _, path := range []string{pre, steady} {
		a := postFrom(t, "127.0.0.21", hs.URL, path, "a", "default")
		if a.Status != http.StatusTooManyRequests || a.Kind != "too_many_requests" || !strings.Contains(a.Value, "127.0.0.21") {
			t.Errorf("%s past the burst: %+v; want 429 too_many_requests", path, a)
		}
	}
	if got := m.get("pre-reboot too_many_requests"); got != 1 {
		t.Errorf("metrics: %d pre-reboot too_many_requests, want 1", got)
	}
	if a := postFrom(t, "127.0.0.22", hs.URL, pre, "b", "default"); !a.ok() {
		t.Errorf("another address: %+v", a)
	}
	f.clock.Advance(10 * time.Second)
	if a := postFrom(t, "127.0.0.21", hs.URL, steady, "a", "default"); !a.ok() {
		t.Errorf("a token later: %+v", a)
	}
}

// TestMemberCheckCached: the member list and the resolutions of the
// members' names answer requests for a few seconds; a member advertised by
// a name is matched by the injected resolver's address, and a request from
// it is refused.
func TestMemberCheckCached(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 20*time.Second)
	if _, err := f.cli.MemberAddAsLearner(ctx, []string{"http://etcd-9.test:2380"}); err != nil {
		t.Fatal(err)
	}
	var lookups atomic.Int32
	o := f.opts(5)
	o.LookupHost = func(_ context.Context, name string) ([]netip.Addr, error) {
		lookups.Add(1)
		if name != "etcd-9.test" {
			t.Errorf("looked up %q", name)
		}
		return []netip.Addr{netip.MustParseAddr("::ffff:127.0.0.29"), netip.MustParseAddr("fd00::9")}, nil
	}
	_, hs := f.server(o)
	pre := fleetlock.PathPreReboot
	a := postFrom(t, "127.0.0.29", hs.URL, pre, "w9", "default")
	if a.Status != http.StatusForbidden || a.Kind != "client_is_etcd_member" || !strings.Contains(a.Value, "etcd-9.test") {
		t.Errorf("pre-reboot from the address behind a member's name: %+v; want refused as that member", a)
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		if a := post(t, hs.URL, pre, id, "default"); !a.ok() {
			t.Errorf("worker %s: %+v", id, a)
		}
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d lookups for 4 requests within the cache period, want 1", n)
	}
	f.clock.Advance(5 * time.Second)
	if a := post(t, hs.URL, pre, "w4", "default"); !a.ok() {
		t.Errorf("worker w4: %+v", a)
	}
	if n := lookups.Load(); n != 2 {
		t.Errorf("%d lookups after the cache period, want 2", n)
	}
}

// TestProxyNotMember: a proxy on a member's host (here the test members'
// 127.0.0.1) makes every worker behind it look like that member; listed
// in Proxies, its requests are checked by id only.
func TestProxyNotMember(t *testing.T) {
	f := newFixture(t, 1)
	_, hs := f.server(f.opts(2))
	pre := fleetlock.PathPreReboot
	if a := postFrom(t, "127.0.0.1", hs.URL, pre, "worker-1", "default"); a.Kind != "client_is_etcd_member" {
		t.Fatalf("from the member's address without proxies: %+v; want refused as a member", a)
	}
	o := f.opts(2)
	o.Proxies = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	_, hs = f.server(o)
	if a := postFrom(t, "127.0.0.1", hs.URL, pre, "worker-1", "default"); !a.ok() {
		t.Errorf("a worker through the listed proxy: %+v", a)
	}
	name := f.c.Members[0].Name
	if a := postFrom(t, "127.0.0.1", hs.URL, pre, name, "default"); a.Kind != "client_is_etcd_member" {
		t.Errorf("member %s by id through the proxy: %+v; want refused", name, a)
	}
}

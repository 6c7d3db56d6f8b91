package fleetlock_test

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/netns"
	"github.com/update-agent/update-agent/tests/testlog"
)

// TestMemberByDNSNameRefused is the audit's case: real members advertise
// DNS names (http://etcd-2.cluster.internal:2380, ...) that the test's
// /etc/hosts resolves, inside a network namespace. A pre-reboot from a
// member's address for the workers' group is refused as that member; a
// worker is served. A member added under a name nobody resolves refuses
// every worker until it is gone. Runs as root (the netns tests fail, never
// skip, without it).
func TestMemberByDNSNameRefused(t *testing.T) {
	hosts := map[string]string{
		"etcd-1.cluster.internal": "192.0.2.11",
		"etcd-2.cluster.internal": "192.0.2.12",
		"etcd-3.cluster.internal": "192.0.2.13",
	}
	if !netns.EnterWithEtc(t, netns.Resolving(hosts), "192.0.2.0/24", "192.0.2.11/32") {
		return
	}
	ctx := ctxT(t, 60*time.Second)
	eps := etcdtest.StartOnNamedHosts(t, []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"},
		[]string{"etcd-1.cluster.internal", "etcd-2.cluster.internal", "etcd-3.cluster.internal"})
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	clock := clockwork.NewFakeClockAt(time.Now())
	s, err := fleetlock.New(cli, fleetlock.Options{Prefix: prefix, Groups: []string{"masters", "workers"},
		Slots: 1, GroupSlots: map[string]int{"workers": 2}, TTL: 30 * time.Second, MaxHold: time.Hour,
		Clock: clock, Log: slog.New(slog.NewTextHandler(&testlog.Buffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "192.0.2.11:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s}
	go hs.Serve(ln)
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	pre := fleetlock.PathPreReboot

	a := postFrom(t, "192.0.2.12", base, pre, "node-b", "workers")
	if a.Status != http.StatusForbidden || a.Kind != "client_is_etcd_member" || !strings.Contains(a.Value, "etcd member cp2") {
		t.Errorf("pre-reboot from etcd-2.cluster.internal's address for group workers: %+v; want refused as member cp2", a)
	}
	if a := postFrom(t, "192.0.2.30", base, pre, "worker-1", "workers"); !a.ok() {
		t.Errorf("pre-reboot from a worker: %+v", a)
	}

	resp, err := cli.MemberAddAsLearner(ctx, []string{"http://etcd-9.cluster.internal:2380"})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // past the member cache
	a = postFrom(t, "192.0.2.31", base, pre, "worker-2", "workers")
	if a.ok() || !strings.Contains(a.Value, "did not resolve: resolving etcd-9.cluster.internal") {
		t.Errorf("a worker while a member's name does not resolve: %+v; want refused", a)
	}
	if _, err := cli.MemberRemove(ctx, resp.Member.ID); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if a := postFrom(t, "192.0.2.31", base, pre, "worker-2", "workers"); !a.ok() {
		t.Errorf("a worker once every member's name resolves: %+v", a)
	}
}

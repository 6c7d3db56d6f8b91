package etcdmember_test

import (
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/netns"
)

// dnsHosts are the members' DNS names and addresses of the DNS tests; the
// process's own host name is none of them.
var dnsHosts = map[string]string{
	"etcd-1.cluster.internal": "192.0.2.11",
	"etcd-2.cluster.internal": "192.0.2.12",
	"etcd-3.cluster.internal": "192.0.2.13",
}

// TestLocalMemberByDNSName: real members advertise DNS names
// (http://etcd-1.cluster.internal:2380, ...) that the test's /etc/hosts
// resolves, inside a network namespace where this host is 192.0.2.11 and
// etcd.local_unit is not set. The host is matched as member cp1 by the
// address behind its name, saying what resolved. A member URL whose name
// does not resolve makes a host that matches nothing an error, never a
// worker; once that member is gone it is a worker again.
func TestLocalMemberByDNSName(t *testing.T) {
	if !netns.EnterWithEtc(t, netns.Resolving(dnsHosts), "192.0.2.0/24", "192.0.2.11/32") {
		return
	}
	ctx := ctxT(t)
	if addrs, err := net.DefaultResolver.LookupHost(ctx, "etcd-2.cluster.internal"); err != nil || len(addrs) != 1 || addrs[0] != "192.0.2.12" {
		t.Fatalf("not resolving with the test's /etc/hosts: %v, %v", addrs, err)
	}
	names := []string{"etcd-1.cluster.internal", "etcd-2.cluster.internal", "etcd-3.cluster.internal"}
	eps := etcdtest.StartOnNamedHosts(t, []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"}, names)
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	member := func() *etcdmember.Cluster { return etcdmember.New(cli, etcdmember.Options{LocalName: "auto"}) }

	m, err := member().LocalMatch(ctx)
	if err != nil || !m.Found || m.Member.Name != "cp1" {
		t.Fatalf("LocalMatch on etcd-1's host = %+v, %v; want member cp1", m, err)
	}
	if want := "member cp1: peer URL http://etcd-1.cluster.internal:2380: etcd-1.cluster.internal resolves to 192.0.2.11, which matches 192.0.2.11 on lo"; m.How != want {
		t.Errorf("How = %q, want %q", m.How, want)
	}

	// A member added under a name nobody resolves; this host becomes
	// 192.0.2.20, behind no member's name.
	resp, err := cli.MemberAddAsLearner(ctx, []string{"http://etcd-9.cluster.internal:2380"})
	if err != nil {
		t.Fatal(err)
	}
	netns.IP(t, "addr", "del", "192.0.2.11/32", "dev", "lo")
	netns.IP(t, "addr", "add", "192.0.2.20/32", "dev", "lo")
	m, err = member().LocalMatch(ctx)
	if err == nil || !strings.Contains(err.Error(), "did not resolve: resolving etcd-9.cluster.internal") ||
		!strings.Contains(err.Error(), "etcd-1.cluster.internal is 192.0.2.11") {
		t.Errorf("a member URL's name that does not resolve: LocalMatch = %+v, %v; want an error saying what resolved and what did not", m, err)
	}
	if _, found, err := member().Local(ctx); found || err == nil {
		t.Errorf("a member URL's name that does not resolve: Local = found %v, %v; want an error", found, err)
	}

	if _, err := cli.MemberRemove(ctx, resp.Member.ID); err != nil {
		t.Fatal(err)
	}
	m, err = member().LocalMatch(ctx)
	if err != nil || m.Found || !strings.Contains(m.How, "a worker") || !strings.Contains(m.How, "etcd-3.cluster.internal is 192.0.2.13") {
		t.Errorf("worker among DNS-named members: LocalMatch = %+v, %v", m, err)
	}
}

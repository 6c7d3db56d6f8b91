package etcdmember_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/netns"
)

// TestLocalMemberOnOwnAddress runs the shipped 3-node control-plane example
// against real members that listen on the hosts' own, non-loopback
// addresses, inside a network namespace (tests/netns): 192.0.2.11 is "this
// host" (on lo); the other members listen on addresses of 192.0.2.0/24
// that the host does not have.
func TestLocalMemberOnOwnAddress(t *testing.T) {
	if !netns.Enter(t, "192.0.2.0/24", "192.0.2.11/32") {
		return
	}
	localMemberInNetns(t)
}

// localMemberInNetns is the test body, inside the namespace.
func localMemberInNetns(t *testing.T) {
	ctx := ctxT(t)
	own, err := etcdmember.OwnAddrs()
	if err != nil || !strings.Contains(fmt.Sprint(own), "192.0.2.11 on lo") {
		t.Fatalf("not in the test's namespace: own addresses %v, %v", own, err)
	}
	hosts := []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"}
	etcdtest.StartOnHosts(t, hosts)
	cfg := shippedExample(t, hosts)
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Etcd.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// As cmd/update-agent wires it.
	member := func(unit string) *etcdmember.Cluster {
		return etcdmember.New(cli, etcdmember.Options{LocalName: cfg.Etcd.Member, LocalUnit: unit})
	}

	// This host is cp1: found by its address in cp1's URLs.
	if local, found, err := member(cfg.Etcd.LocalUnit).Local(ctx); err != nil || !found || local.Name != "cp1" {
		t.Fatalf("Local on cp1's host = %+v, found %v, %v; want member cp1", local, found, err)
	}
	m, err := member(cfg.Etcd.LocalUnit).LocalMatch(ctx)
	if err != nil || !m.Found || m.Member.Name != "cp1" {
		t.Fatalf("LocalMatch on cp1's host = %+v, %v; want member cp1", m, err)
	}
	if want := "member cp1: peer URL http://192.0.2.11:2380 matches 192.0.2.11 on lo"; m.How != want {
		t.Errorf("How = %q, want %q", m.How, want)
	}
	// So the engine's checks apply to it: it is healthy and, when it
	// leads, the leader.
	ac := adapters.Cluster{C: member(cfg.Etcd.LocalUnit), Policy: etcdmember.Policy{RequireQuorum: true, MaxLag: 1000}}
	if ok, why, err := ac.LocalHealthy(ctx); !ok || err != nil {
		t.Errorf("LocalHealthy on cp1's host = %v %q %v", ok, why, err)
	}
	h, err := member("").Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lead, _ := h.Leader()
	if isLead, err := ac.LocalIsLeader(ctx); err != nil || isLead != (lead.Name == "cp1") {
		t.Errorf("LocalIsLeader = %v, %v; the leader is %s", isLead, err, lead.Name)
	}

	// This host becomes 192.0.2.14, the peer URL of a member added but
	// missing (never started): an error, with or without local_unit.
	netns.IP(t, "addr", "del", "192.0.2.11/32", "dev", "lo")
	netns.IP(t, "addr", "add", "192.0.2.14/32", "dev", "lo")
	if _, err := cli.MemberAddAsLearner(ctx, []string{"http://192.0.2.14:2380"}); err != nil {
		t.Fatal(err)
	}
	for _, unit := range []string{cfg.Etcd.LocalUnit, ""} {
		m, err := member(unit).LocalMatch(ctx)
		if err == nil || !strings.Contains(err.Error(), "http://192.0.2.14:2380 matches 192.0.2.14 on lo") {
			t.Errorf("local_unit %q, own address in a missing member's peer URL: LocalMatch = %+v, %v; want an error", unit, m, err)
		}
		if _, found, err := member(unit).Local(ctx); found || err == nil {
			t.Errorf("local_unit %q, missing member: Local = found %v, %v; want an error", unit, found, err)
		}
	}

	// A worker (192.0.2.20) is a worker; with local_unit set it is an error.
	netns.IP(t, "addr", "del", "192.0.2.14/32", "dev", "lo")
	netns.IP(t, "addr", "add", "192.0.2.20/32", "dev", "lo")
	if m, err := member("").LocalMatch(ctx); err != nil || m.Found || !strings.Contains(m.How, "a worker") {
		t.Errorf("worker: LocalMatch = %+v, %v", m, err)
	}
	if m, err := member("etcd.service").LocalMatch(ctx); err == nil || !strings.Contains(err.Error(), "etcd.local_unit = etcd.service") {
		t.Errorf("worker address with local_unit: LocalMatch = %+v, %v; want an error", m, err)
	}
}

// shippedExample loads packaging/examples/control-plane-3-node as shipped,
// with the addresses of this test and plain HTTP.
func shippedExample(t *testing.T, hosts []string) *config.Config {
	root := t.TempDir()
	dir := filepath.Join(root, "etc/update-agent/config.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, _ := filepath.Glob("../../packaging/examples/control-plane-3-node/*.toml")
	if len(src) == 0 {
		t.Fatal("no shipped control-plane example")
	}
	for _, f := range src {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var eps []string
	for _, h := range hosts {
		eps = append(eps, fmt.Sprintf("%q", "http://"+h+":2379"))
	}
	over := fmt.Sprintf("[etcd]\nendpoints = [%s]\nca_file = \"\"\ncert_file = \"\"\nkey_file = \"\"\n", strings.Join(eps, ", "))
	if err := os.WriteFile(filepath.Join(dir, "99-test.toml"), []byte(over), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Etcd.Member != "auto" || cfg.Etcd.LocalUnit == "" {
		t.Fatalf("the shipped example changed shape: member %q, local_unit %q", cfg.Etcd.Member, cfg.Etcd.LocalUnit)
	}
	return cfg
}

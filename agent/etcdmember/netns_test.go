package etcdmember_test

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/etcdmember"
)

// netnsChild marks the re-executed test binary running inside the network
// namespace: Go moves goroutines between threads, so a whole process in the
// namespace is the robust way to have every socket and netlink call there.
const netnsChild = "UA_ETCDMEMBER_NETNS_CHILD"

// TestLocalMemberOnOwnAddress runs the shipped 3-node control-plane example
// against real members that listen on the hosts' own, non-loopback
// addresses, inside a network namespace this test makes: 192.0.2.11 is
// "this host" (on lo), 192.0.2.0/24 is local to the namespace (AnyIP) so
// the other members can listen on addresses the host does not have.
// It needs root and iproute2 and fails, never skips, without them.
func TestLocalMemberOnOwnAddress(t *testing.T) {
	if os.Getenv(netnsChild) != "" {
		localMemberInNetns(t)
		return
	}
	ns := fmt.Sprintf("ua-member-%d", os.Getpid())
	ip(t, "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	ip(t, "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	ip(t, "netns", "exec", ns, "ip", "addr", "add", "192.0.2.11/32", "dev", "lo")
	ip(t, "netns", "exec", ns, "ip", "route", "add", "local", "192.0.2.0/24", "dev", "lo")

	args := []string{"netns", "exec", ns, os.Args[0], "-test.run=^TestLocalMemberOnOwnAddress$", "-test.v", "-test.count=1"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), netnsChild+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in network namespace %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("the test in the network namespace failed: %v", err)
	}
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s (this test needs root and iproute2)", strings.Join(args, " "), err, out)
	}
}

// localMemberInNetns is the test body, inside the namespace.
func localMemberInNetns(t *testing.T) {
	ctx := ctxT(t)
	own, err := etcdmember.OwnAddrs()
	if err != nil || !strings.Contains(fmt.Sprint(own), "192.0.2.11 on lo") {
		t.Fatalf("not in the test's namespace: own addresses %v, %v", own, err)
	}
	hosts := []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"}
	startMembers(t, hosts)
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
	ip(t, "addr", "del", "192.0.2.11/32", "dev", "lo")
	ip(t, "addr", "add", "192.0.2.14/32", "dev", "lo")
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
	ip(t, "addr", "del", "192.0.2.14/32", "dev", "lo")
	ip(t, "addr", "add", "192.0.2.20/32", "dev", "lo")
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

// startMembers runs members cp1.. on hosts, ports 2379 (client) and 2380
// (peer) as on real hosts, until the test ends.
func startMembers(t *testing.T, hosts []string) {
	var initial []string
	for i, h := range hosts {
		initial = append(initial, fmt.Sprintf("cp%d=http://%s:2380", i+1, h))
	}
	var started []*embed.Etcd
	t.Cleanup(func() {
		for _, e := range started {
			e.Close()
		}
	})
	base := t.TempDir()
	for i, h := range hosts {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("cp%d", i+1)
		cfg.Dir = filepath.Join(base, cfg.Name)
		cu, _ := url.Parse("http://" + h + ":2379")
		pu, _ := url.Parse("http://" + h + ":2380")
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "netns"
		cfg.StrictReconfigCheck = false // members just started count as unhealthy for 5s
		cfg.TickMs, cfg.ElectionMs = 10, 100
		cfg.UnsafeNoFsync = true
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.ListenMetricsUrls = nil
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatalf("starting etcd member %s on %s: %v", cfg.Name, h, err)
		}
		started = append(started, e)
	}
	for _, e := range started {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("etcd members not ready after 30s")
		}
	}
}

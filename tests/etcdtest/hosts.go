package etcdtest

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// StartOnHosts runs members cp1, cp2, ... listening on hosts (one address
// each), client port 2379 and peer port 2380 as on real hosts, plain HTTP,
// until the test ends. For tests in a network namespace (tests/netns),
// where the addresses are free; it returns the client URLs.
func StartOnHosts(t testing.TB, hosts []string) []string {
	t.Helper()
	return StartOnNamedHosts(t, hosts, hosts)
}

// StartOnNamedHosts is StartOnHosts with members that advertise names[i]
// (DNS names the test resolves to hosts[i]) in their peer and client URLs,
// listening on hosts[i]; it returns the advertised client URLs.
func StartOnNamedHosts(t testing.TB, hosts, names []string) []string {
	t.Helper()
	var initial, clients []string
	for i, n := range names {
		initial = append(initial, fmt.Sprintf("cp%d=http://%s:2380", i+1, n))
		clients = append(clients, "http://"+n+":2379")
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
		acu, _ := url.Parse("http://" + names[i] + ":2379")
		apu, _ := url.Parse("http://" + names[i] + ":2380")
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*acu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*apu}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "etcdtest-hosts"
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
	return clients
}

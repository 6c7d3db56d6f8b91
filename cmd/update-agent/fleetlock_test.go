package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/metrics"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/testlog"
)

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// workerDialer connects from 127.0.0.9: the test etcd's members are on
// 127.0.0.1, and the server refuses FleetLock clients that are members.
var workerDialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9)}}

// workerClient is a plain-HTTP FleetLock client from a worker's address.
var workerClient = &http.Client{Transport: &http.Transport{DialContext: workerDialer.DialContext}, Timeout: 10 * time.Second}

// fleetLockPost sends zincati's request.
func fleetLockPost(c *http.Client, url, id string) (int, string, error) {
	return fleetLockPostGroup(c, url, id, "default")
}

func fleetLockPostGroup(c *http.Client, url, id, group string) (int, string, error) {
	body := fmt.Sprintf(`{"client_params":{"id":%q,"group":%q}}`, id, group)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("fleet-lock-protocol", "true")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestFleetLockServe: `update-agent fleetlock serve` over HTTPS with client
// certificates, its clients in `lock status`, its metrics, SIGTERM.
func TestFleetLockServe(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	pki := etcdtest.NewPKI(t)
	addr := freeAddr(t)
	root := configRoot(t, map[string]string{"50-fleetlock.toml": fmt.Sprintf(`
[etcd]
endpoints = [%q]
[metrics]
listen = "unix:/run/update-agent/metrics.sock"
[fleetlock]
listen = %q
cert_file = "/etc/fl/server.pem"
key_file = "/etc/fl/server-key.pem"
client_ca_file = "/etc/fl/ca.pem"
`, c.Members[0].ClientURL, addr)})
	os.MkdirAll(filepath.Join(root, "etc/fl"), 0o755)
	os.MkdirAll(filepath.Join(root, "run/update-agent"), 0o755)
	for src, dst := range map[string]string{pki.CAFile: "ca.pem", pki.ServerCertFile: "server.pem", pki.ServerKey: "server-key.pem"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "etc/fl", dst), b, 0o600)
	}
	notify := listenNotify(t, t.TempDir())
	done := make(chan error, 1)
	var stderr testlog.Buffer
	go func() {
		done <- runFleetLock(&cmdEnv{stdout: io.Discard, stderr: &stderr}, []string{"serve", "--root", root})
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", stderr.String())
		}
	})

	ca, _ := os.ReadFile(pki.CAFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := func(certFile, keyFile string) *http.Client {
		tc := &tls.Config{RootCAs: pool}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DialContext: workerDialer.DialContext}, Timeout: 10 * time.Second}
	}
	url := "https://" + addr + "/v1/pre-reboot"
	good := client(pki.ClientCertFile, pki.ClientKey)
	// Type=notify: READY=1 once the port is bound, so a client may ask
	// right after, without retrying.
	waitFor(t, "READY=1", func() bool { return notify.Has("READY=1") })
	if code, body, err := fleetLockPost(good, url, "worker-1"); err != nil || code != http.StatusOK {
		t.Fatalf("first request after READY=1: %d %s %v", code, body, err)
	}
	for name, cl := range map[string]*http.Client{"no client certificate": client("", ""),
		"a certificate of another CA": client(pki.OtherClientCert, pki.OtherKey)} {
		if code, _, err := fleetLockPost(cl, url, "intruder"); err == nil {
			t.Errorf("%s: answered %d, want the TLS handshake refused", name, code)
		}
	}
	if code, body, err := fleetLockPost(good, url, "worker-2"); err != nil || code != http.StatusConflict ||
		!strings.Contains(body, `"kind":"failed_lock_semaphore_full"`) {
		t.Errorf("second client: %d %s %v", code, body, err)
	}

	code, out, errOut := runIn("lock", "status", "--root", root)
	if code != exitOK || !strings.Contains(out, "fleetlock:worker-1 (FleetLock client) from 127.0.0.9 cert CN=") ||
		!strings.Contains(out, "fleetlock:worker-2 (FleetLock client)") {
		t.Errorf("lock status: exit %d\n%s%s", code, out, errOut)
	}

	code, out, _ = runIn("lock", "status", "--root", root, "--json")
	var gs []lock.GroupStatus
	if err := json.Unmarshal([]byte(out), &gs); code != exitOK || err != nil || len(gs) != 1 || len(gs[0].Holders) != 1 ||
		gs[0].Holders[0].Kind != lock.KindFleetLock || gs[0].Holders[0].Node != "fleetlock:worker-1" ||
		gs[0].Holders[0].Client == nil || gs[0].Holders[0].Client.Addr != "127.0.0.9" {
		t.Errorf("lock status --json: exit %d, %v\n%s", code, err, out)
	}

	mc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(root, "run/update-agent/metrics.sock"))
	}}}
	resp, err := mc.Get("http://x/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`update_agent_fleetlock_requests_total{endpoint="pre-reboot",kind="ok"} 1`,
		`update_agent_fleetlock_requests_total{endpoint="pre-reboot",kind="failed_lock_semaphore_full"} 1`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("fleetlock serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("fleetlock serve did not stop on SIGTERM")
	}
	waitFor(t, "STOPPING=1 after SIGTERM", func() bool { return notify.Has("STOPPING=1") })
	if !strings.Contains(stderr.String(), "FleetLock slot granted") {
		t.Errorf("no grant logged:\n%s", stderr.String())
	}

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"fleetlock"}, exitUsage},
		{[]string{"fleetlock", "serve", "--root", configRoot(t, nil)}, exitBadConfig},
		{[]string{"fleetlock", "serve", "--root", configRoot(t, map[string]string{"50.toml": "[fleetlock]\nlisten = \"x\"\n"})}, exitBadConfig},
	} {
		if code, _, errOut := runIn(tc.args...); code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, errOut)
		}
	}
}

// TestDaemonServesFleetLock: the daemon's serve starts the FleetLock server
// when fleetlock.listen is set, with its own etcd client when the agent
// takes no lock itself.
func TestDaemonServesFleetLock(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := config.Default()
	cfg.Lock.Enabled = false
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	cfg.FleetLock.Listen = freeAddr(t)
	a := &agent{cfg: cfg, root: t.TempDir(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: metrics.New(version)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.serveFleetLock(ctx); err != nil {
		t.Fatal(err)
	}
	code, body, err := fleetLockPost(workerClient, "http://"+cfg.FleetLock.Listen+"/v1/pre-reboot", "worker-1")
	if err != nil || code != http.StatusOK {
		t.Fatalf("pre-reboot: %d %s %v", code, body, err)
	}
}

// TestFleetLockReadsMinInterval: the server takes lock.min_interval from
// the configuration: a client whose turn comes right after a release of
// the group is held back.
func TestFleetLockReadsMinInterval(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t, nil)
	cfg := config.Default()
	cfg.Lock.Enabled = false
	cfg.Lock.MinInterval = config.Duration(time.Minute)
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	cfg.FleetLock.Listen = freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := lock.NewMarker(ctx, cli, cfg.Lock.KeyPrefix, cfg.Lock.Group, "cp1", cfg.Lock.MinInterval.D())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Txn(ctx).Then(m.Ops()...).Commit(); err != nil {
		t.Fatal(err)
	}
	a := &agent{cfg: cfg, root: t.TempDir(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: metrics.New(version)}
	if err := a.serveFleetLock(ctx); err != nil {
		t.Fatal(err)
	}
	code, body, err := fleetLockPost(workerClient, "http://"+cfg.FleetLock.Listen+"/v1/pre-reboot", "worker-1")
	if err != nil || code != http.StatusConflict || !strings.Contains(body, `"kind":"failed_lock_min_interval"`) {
		t.Fatalf("pre-reboot right after cp1's release: %d %s %v", code, body, err)
	}
}

// TestFleetLockBadTLSIsConfigError: a FleetLock TLS file that turned bad
// after the configuration was checked (here: never checked) fails the
// start with exit 78, as a bad configuration, so systemd does not restart
// into it.
func TestFleetLockBadTLSIsConfigError(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "cert.pem"), []byte("not a certificate"), 0o600)
	cfg := config.Default()
	cfg.Lock.Enabled = false
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	cfg.FleetLock.Listen = freeAddr(t)
	cfg.FleetLock.CertFile, cfg.FleetLock.KeyFile = "/cert.pem", "/cert.pem"
	a := &agent{cfg: cfg, root: root, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: metrics.New(version)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := a.serveFleetLock(ctx)
	if code := exitCode(err, io.Discard); code != exitBadConfig {
		t.Fatalf("exit %d (%v), want %d", code, err, exitBadConfig)
	}
}

// TestFleetLockReadsBounds: the server takes fleetlock.allow_ids,
// allow_networks and max_waiters from the configuration.
func TestFleetLockReadsBounds(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := config.Default()
	cfg.Lock.Enabled = false
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	cfg.FleetLock.Listen = freeAddr(t)
	cfg.FleetLock.MaxWaiters = 1
	cfg.FleetLock.AllowIDs = []string{"worker-1", "worker-2", "worker-3"}
	cfg.FleetLock.AllowNetworks = []string{"127.0.0.8/29"}
	a := &agent{cfg: cfg, root: t.TempDir(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: metrics.New(version)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.serveFleetLock(ctx); err != nil {
		t.Fatal(err)
	}
	url := "http://" + cfg.FleetLock.Listen + "/v1/pre-reboot"
	for _, tc := range []struct {
		id   string
		code int
		kind string
	}{
		{"intruder", http.StatusForbidden, `"kind":"client_not_allowed"`},
		{"worker-1", http.StatusOK, ""},
		{"worker-2", http.StatusConflict, `"kind":"failed_lock_semaphore_full"`},
		{"worker-3", http.StatusTooManyRequests, `"kind":"failed_lock_queue_full"`},
	} {
		code, body, err := fleetLockPost(workerClient, url, tc.id)
		if err != nil || code != tc.code || !strings.Contains(body, tc.kind) {
			t.Fatalf("%s: %d %s %v, want %d %s", tc.id, code, body, err, tc.code, tc.kind)
		}
	}
	// 127.0.0.1 is outside allow_networks (and the test etcd's address).
	local := &http.Client{Timeout: 10 * time.Second}
	if code, body, err := fleetLockPost(local, url, "worker-1"); err != nil || code != http.StatusForbidden ||
		!strings.Contains(body, "not in fleetlock.allow_networks") {
		t.Fatalf("from 127.0.0.1: %d %s %v", code, body, err)
	}
}

// TestFleetLockReadsProxies: fleetlock.proxies reaches the server: a
// worker through a proxy on the member's host (the test etcd's 127.0.0.1)
// is served, not refused as that member.
func TestFleetLockReadsProxies(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := config.Default()
	cfg.Lock.Enabled = false
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	cfg.FleetLock.Listen = freeAddr(t)
	cfg.FleetLock.Proxies = []string{"127.0.0.1"}
	a := &agent{cfg: cfg, root: t.TempDir(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: metrics.New(version)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.serveFleetLock(ctx); err != nil {
		t.Fatal(err)
	}
	local := &http.Client{Timeout: 10 * time.Second}
	if code, body, err := fleetLockPost(local, "http://"+cfg.FleetLock.Listen+"/v1/pre-reboot", "worker-1"); err != nil || code != http.StatusOK {
		t.Fatalf("a worker through the proxy on 127.0.0.1: %d %s %v", code, body, err)
	}
}

// TestFleetLockServesWorkerGroups: [[fleetlock.groups]] reach the daemon's
// server: a zincati-only group with its own slots and allow-list, served
// beside lock.group.
func TestFleetLockServesWorkerGroups(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := config.Default()
	cfg.Lock.Enabled = false
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	cfg.FleetLock.Listen = freeAddr(t)
	cfg.FleetLock.Groups = []config.FleetLockGroup{{Name: "workers", Slots: 2, AllowIDs: []string{}, AllowNetworks: []string{"127.0.0.8/29"}}}
	a := &agent{cfg: cfg, root: t.TempDir(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: metrics.New(version)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.serveFleetLock(ctx); err != nil {
		t.Fatal(err)
	}
	url := "http://" + cfg.FleetLock.Listen + "/v1/pre-reboot"
	for _, tc := range []struct {
		id, group string
		code      int
		kind      string
	}{
		{"worker-1", "workers", http.StatusOK, ""},
		{"worker-2", "workers", http.StatusOK, ""}, // 2 slots in workers
		{"worker-3", "workers", http.StatusConflict, `"kind":"failed_lock_semaphore_full"`},
		{"worker-4", "default", http.StatusOK, ""}, // lock.group is still served, with its own slot
		{"worker-5", "other", http.StatusNotFound, `"kind":"unknown_group"`},
	} {
		code, body, err := fleetLockPostGroup(workerClient, url, tc.id, tc.group)
		if err != nil || code != tc.code || !strings.Contains(body, tc.kind) {
			t.Fatalf("%s in %s: %d %s %v, want %d %s", tc.id, tc.group, code, body, err, tc.code, tc.kind)
		}
	}
	// The workers group's allow_networks: 127.0.0.1 is outside it.
	local := &http.Client{Timeout: 10 * time.Second}
	if code, body, err := fleetLockPostGroup(local, url, "worker-6", "workers"); err != nil || code != http.StatusForbidden {
		t.Fatalf("from 127.0.0.1: %d %s %v", code, body, err)
	}
}

// TestFleetLockServesLocalMember: fleetlock.serve_local_member reaches the
// server with this host's zincati id, derived from its /etc/machine-id as
// zincati does, and the agent's member lookup: this host's zincati, over
// loopback from the member's address, is granted its member's slots; a
// client with another id from there is still refused as the member.
func TestFleetLockServesLocalMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := config.Default()
	cfg.Lock.Enabled = false
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	cfg.Etcd.Member = c.Members[0].Name
	cfg.Etcd.AllowQuorumLoss = true // one member: its reboot loses quorum
	cfg.FleetLock.Listen = freeAddr(t)
	cfg.FleetLock.ServeLocalMember = true
	root := t.TempDir()
	const machineID = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "etc/machine-id"), []byte(machineID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := graph.NodeUUID(machineID)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{cfg: cfg, root: root, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: metrics.New(version)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.serveFleetLock(ctx); err != nil {
		t.Fatal(err)
	}
	url := "http://" + cfg.FleetLock.Listen + "/v1/pre-reboot"
	local := &http.Client{Timeout: 10 * time.Second} // from 127.0.0.1, the member's address
	if code, body, err := fleetLockPost(local, url, "fedcba9876543210fedcba9876543210"); err != nil || code != http.StatusForbidden ||
		!strings.Contains(body, "client_is_etcd_member") {
		t.Fatalf("another id from the member's address: %d %s %v", code, body, err)
	}
	if code, body, err := fleetLockPost(local, url, id); err != nil || code != http.StatusOK {
		t.Fatalf("this host's zincati: %d %s %v", code, body, err)
	}
	st, err := lock.Status(ctx, c.Client(t, nil), cfg.Lock.KeyPrefix, 1, lock.MembersGroup, time.Now())
	if err != nil || len(st) != 1 || len(st[0].Holders) != 1 || st[0].Holders[0].Node != lock.FleetLockNode(id) {
		t.Fatalf("member slot: %+v %v; want fleetlock:%s", st, err, id)
	}
}

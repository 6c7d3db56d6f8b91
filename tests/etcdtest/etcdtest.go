// Package etcdtest runs a real etcd cluster (go.etcd.io/etcd/server/v3/embed)
// inside a test process: several members on 127.0.0.1, each with its own data
// directory, that can be stopped and restarted like a rebooting host.
//
// Members are started one after another and only then awaited: started in
// parallel each waits about a second per peer.
package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options shape the cluster. The zero value gives 3 members, heartbeat 10 ms,
// election 100 ms, plain HTTP.
type Options struct {
	Members    int
	TickMs     uint
	ElectionMs uint
	// TLS, when set, serves clients over HTTPS with these files and requires
	// client certificates signed by CAFile (peers stay plain HTTP).
	TLS *TLSFiles
	// AuthRootPassword, when set, creates user root with this password and
	// enables authentication.
	AuthRootPassword string
	// QuotaBackendBytes, when set, is every member's backend quota: a
	// small one lets a test fill the database and raise a real NOSPACE.
	QuotaBackendBytes int64
}

// TLSFiles are PEM files for the server side of client connections.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// Member is one etcd member.
type Member struct {
	Name      string
	Dir       string
	ClientURL string // advertised; a proxy in front of listenURL
	PeerURL   string

	listenURL string
	proxy     *proxy

	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
}

// Cluster is a running embedded cluster.
type Cluster struct {
	t       testing.TB
	opts    Options
	Members []*Member
	initial string
}

// Start starts a cluster and registers its shutdown with t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Members == 0 {
		opts.Members = 3
	}
	if opts.TickMs == 0 {
		opts.TickMs = 10
	}
	if opts.ElectionMs == 0 {
		opts.ElectionMs = 100
	}
	base := t.TempDir()
	var c *Cluster
	for attempt := 1; ; attempt++ {
		var err error
		c, err = startMembers(t, opts, filepath.Join(base, strconv.Itoa(attempt)))
		if err == nil {
			break
		}
		// A port drawn free can still be taken before etcd binds it, by a
		// process that does not use this package; draw new ones.
		if attempt == 3 || !addrInUse(err) {
			t.Fatal(err)
		}
		t.Logf("etcdtest: %v; drawing new ports", err)
	}
	t.Cleanup(c.Close)
	for i := range c.Members {
		if err := c.WaitReady(i, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if opts.AuthRootPassword != "" {
		c.enableAuth()
	}
	return c
}

// startMembers creates the members on fresh ports under dir and starts
// them; on an error it stops what it started.
func startMembers(t testing.TB, opts Options, dir string) (*Cluster, error) {
	c := &Cluster{t: t, opts: opts}
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	var peers []string
	for i := 0; i < opts.Members; i++ {
		ports := freePorts(t, 3)
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			Dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
			ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
			listenURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2]),
		}
		var err error
		m.proxy, err = newProxy(fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[2]))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("etcd client proxy: %w", err)
		}
		c.Members = append(c.Members, m)
		peers = append(peers, m.Name+"="+m.PeerURL)
	}
	c.initial = strings.Join(peers, ",")
	for i := range c.Members {
		if err := c.start(i, "new"); err != nil {
			c.Close()
			return nil, fmt.Errorf("starting etcd member %d: %w", i, err)
		}
	}
	return c, nil
}

func (c *Cluster) start(i int, state string) error {
	m := c.Members[i]
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	cu, _ := url.Parse(m.ClientURL)
	lu, _ := url.Parse(m.listenURL)
	pu, _ := url.Parse(m.PeerURL)
	cfg.ListenClientUrls = []url.URL{*lu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = c.initial
	cfg.InitialClusterToken = "etcdtest"
	cfg.ClusterState = state
	cfg.TickMs = c.opts.TickMs
	cfg.ElectionMs = c.opts.ElectionMs
	cfg.LogLevel = "error"
	// Even at "error" a member logs its listeners closing on every stop.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Coordination is under test, not durability; fsync on a shared CI disk
	// only adds spurious elections.
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = c.opts.QuotaBackendBytes
	cfg.ListenMetricsUrls = nil
	if c.opts.TLS != nil {
		cfg.ClientTLSInfo.CertFile = c.opts.TLS.CertFile
		cfg.ClientTLSInfo.KeyFile = c.opts.TLS.KeyFile
		cfg.ClientTLSInfo.TrustedCAFile = c.opts.TLS.CAFile
		cfg.ClientTLSInfo.ClientCertAuth = true
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	m.proxy.setDown(false)
	m.mu.Lock()
	m.etcd = e
	m.mu.Unlock()
	return nil
}

// WaitReady waits until member i serves requests.
func (c *Cluster) WaitReady(i int, timeout time.Duration) error {
	m := c.Members[i]
	m.mu.Lock()
	e := m.etcd
	m.mu.Unlock()
	if e == nil {
		return fmt.Errorf("etcd member %s is stopped", m.Name)
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	case <-time.After(timeout):
		return fmt.Errorf("etcd member %s not ready after %v", m.Name, timeout)
	}
}

// Stop stops member i gracefully (a graceful stop of the leader hands
// leadership over by itself, as etcd does on SIGTERM). Client connections
// are cut first, as when a host goes down; then embed's Close stops the
// client servers, raft and storage, in that order. Stop returns once the
// member is down and its ports are free; the rest of Close (the peer
// listener lingers about a second) finishes in the background.
func (c *Cluster) Stop(i int) {
	m := c.Members[i]
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e == nil {
		return
	}
	m.proxy.setDown(true)
	m.proxy.cut()
	go e.Close()
	<-e.Server.StopNotify()
	for _, l := range e.Clients {
		l.Close()
	}
	for _, p := range e.Peers {
		p.Listener.Close()
	}
}

// kill stops member i without a leadership hand-over. Only for Close: with
// no client connected (the proxy refuses them), no request can reach the
// storage HardStop closes.
func (c *Cluster) kill(i int) {
	m := c.Members[i]
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e == nil {
		return
	}
	m.proxy.setDown(true)
	m.proxy.cut()
	e.Server.HardStop()
	go e.Close()
}

// Restart starts a stopped member i again from its data directory and waits
// until it serves.
func (c *Cluster) Restart(i int) error {
	if err := c.start(i, "existing"); err != nil {
		return fmt.Errorf("restarting etcd member %s: %w", c.Members[i].Name, err)
	}
	return c.WaitReady(i, 20*time.Second)
}

// Running reports whether member i is running.
func (c *Cluster) Running(i int) bool {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil
}

// LeaderIndex returns the index of the member that running members agree is
// the leader, or -1.
func (c *Cluster) LeaderIndex() int {
	for i, m := range c.Members {
		m.mu.Lock()
		e := m.etcd
		m.mu.Unlock()
		if e == nil {
			continue
		}
		lead := uint64(e.Server.Leader())
		if lead != 0 && lead == uint64(e.Server.MemberID()) {
			return i
		}
	}
	return -1
}

// Term returns the highest raft term among running members.
func (c *Cluster) Term() uint64 {
	var term uint64
	for _, m := range c.Members {
		m.mu.Lock()
		e := m.etcd
		m.mu.Unlock()
		if e != nil && e.Server.Term() > term {
			term = e.Server.Term()
		}
	}
	return term
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Client returns a client for endpoints (all members when none are given),
// closed at test cleanup. tlsConfig may be nil.
func (c *Cluster) Client(t testing.TB, tlsConfig *tls.Config, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func (c *Cluster) enableAuth() {
	c.t.Helper()
	cli := c.Client(c.t, c.clientTLS())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", c.opts.AuthRootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			c.t.Fatalf("enabling etcd auth: %v", err)
		}
	}
}

// clientTLS is what the cluster's own admin calls use under TLS: the server
// certificate doubles as a client certificate.
func (c *Cluster) clientTLS() *tls.Config {
	if c.opts.TLS == nil {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(c.opts.TLS.CertFile, c.opts.TLS.KeyFile)
	if err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
	pem, err := os.ReadFile(c.opts.TLS.CAFile)
	if err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}
}

// Close stops every member; Start registers it with t.Cleanup.
func (c *Cluster) Close() {
	// Followers first, then the leader without a hand-over: a graceful
	// stop of the last member waits seconds trying to hand leadership to
	// peers that are gone.
	lead := c.LeaderIndex()
	for i := range c.Members {
		if i != lead {
			c.Stop(i)
		}
	}
	if lead >= 0 {
		c.kill(lead)
	}
	for _, m := range c.Members {
		m.proxy.close()
	}
}

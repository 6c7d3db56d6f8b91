package fleetlock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestStrangerCannotRelease: the first attempt. A stranger's
// steady-state for worker-1, which holds the slot and may be down, is
// refused with client_not_owner, as is its pre-reboot for that id: the
// slot stays worker-1's and worker-2 is not granted. worker-1 itself,
// back from its reboot at the same address, releases.
func TestStrangerCannotRelease(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 20*time.Second)
	_, hs := f.server(f.opts(1))
	pre, steady := fleetlock.PathPreReboot, fleetlock.PathSteadyState
	const worker1, worker2, stranger = "127.0.0.2", "127.0.0.3", "127.0.0.66"

	if a := postFrom(t, worker1, hs.URL, pre, "worker-1", "default"); !a.ok() {
		t.Fatal(a)
	}
	if a := postFrom(t, worker2, hs.URL, pre, "worker-2", "default"); a.Kind != "failed_lock_semaphore_full" {
		t.Fatalf("worker-2: %+v", a)
	}
	for _, path := range []string{steady, pre} {
		a := postFrom(t, stranger, hs.URL, path, "worker-1", "default")
		if a.Status != http.StatusForbidden || a.Kind != string(fleetlock.KindNotOwner) ||
			!strings.Contains(a.Value, "queued by 127.0.0.2, not by 127.0.0.66") {
			t.Fatalf("stranger's %s for worker-1: %+v, want 403 client_not_owner", path, a)
		}
		// worker-2's entry is its own too.
		if a := postFrom(t, stranger, hs.URL, path, "worker-2", "default"); a.Kind != string(fleetlock.KindNotOwner) {
			t.Fatalf("stranger's %s for worker-2: %+v", path, a)
		}
	}
	if a := postFrom(t, worker2, hs.URL, pre, "worker-2", "default"); a.Kind != "failed_lock_semaphore_full" {
		t.Fatalf("worker-2 after the stranger's steady-state: %+v, want still waiting", a)
	}
	h, w := f.queue(ctx, 1)
	if !slices.Equal(names(h), []string{"fleetlock:worker-1"}) || !slices.Equal(names(w), []string{"fleetlock:worker-2"}) {
		t.Fatalf("holders %v waiters %v", names(h), names(w))
	}
	if !strings.Contains(f.buf.String(), "the entry belongs to another client") {
		t.Error("refusal not logged")
	}
	// worker-1 rebooted: new connections, same address.
	clientFrom(worker1).CloseIdleConnections()
	if a := postFrom(t, worker1, hs.URL, steady, "worker-1", "default"); !a.ok() {
		t.Fatalf("worker-1's own steady-state: %+v", a)
	}
	if a := postFrom(t, worker2, hs.URL, pre, "worker-2", "default"); !a.ok() {
		t.Fatalf("worker-2 after worker-1 released: %+v", a)
	}
}

// TestCertificateBindsEntry: a client that presented a verified
// certificate owns its entry by that certificate's names: the same
// certificate from another address may release it; the same address
// without it, or with another certificate, may not.
func TestCertificateBindsEntry(t *testing.T) {
	f := newFixture(t, 1)
	pki := etcdtest.NewPKI(t)
	s, err := fleetlock.New(f.cli, f.opts(1))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, ca := range []string{pki.CAFile, pki.OtherCAFile} {
		b, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(b)
	}
	serverCert, err := tls.LoadX509KeyPair(pki.ServerCertFile, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s)
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	client := func(src, certFile, keyFile string) *http.Client {
		tc := &tls.Config{RootCAs: pool}
		if certFile != "" {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{c}
		}
		tr := clientFrom(src).Transport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	req := func(c *http.Client, path string) answer {
		b := []byte(`{"client_params":{"id":"worker-1","group":"default"}}`)
		return postVia(t, c, hs.URL+path, map[string]string{"fleet-lock-protocol": "true"}, b)
	}
	if a := req(client("127.0.0.2", pki.ClientCertFile, pki.ClientKey), fleetlock.PathPreReboot); !a.ok() {
		t.Fatal(a)
	}
	for name, c := range map[string]*http.Client{
		"same address, no certificate":      client("127.0.0.2", "", ""),
		"same address, another certificate": client("127.0.0.2", pki.OtherClientCert, pki.OtherKey),
	} {
		if a := req(c, fleetlock.PathSteadyState); a.Kind != string(fleetlock.KindNotOwner) {
			t.Fatalf("%s: %+v, want client_not_owner", name, a)
		}
	}
	if a := req(client("127.0.0.3", pki.ClientCertFile, pki.ClientKey), fleetlock.PathSteadyState); !a.ok() {
		t.Fatalf("the certificate from a new address: %+v", a)
	}
}

// TestFloodBounded: the second attempt. 300 pre-reboots with new
// ids, through two servers at once, queue at most fleetlock.max_waiters
// clients (plus the one granted the free slot); the rest get
// failed_lock_queue_full and no etcd lease. An agent queued before keeps
// its place, and known clients keep asking.
func TestFloodBounded(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 2*time.Minute)
	const maxWaiters = 5
	o := f.opts(1)
	o.MaxWaiters = maxWaiters
	_, hs1 := f.server(o)
	_, hs2 := f.server(o)
	holder := f.lock("holder", 1)
	if _, err := holder.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	if a := postFrom(t, "127.0.0.2", hs1.URL, fleetlock.PathPreReboot, "worker-1", "default"); a.Kind != "failed_lock_semaphore_full" {
		t.Fatalf("worker-1: %+v", a)
	}
	leasesBefore, err := f.cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	kinds := map[string]int{}
	var wg sync.WaitGroup
	next := make(chan int)
	for g := range 8 {
		wg.Go(func() {
			base := []string{hs1.URL, hs2.URL}[g%2]
			for i := range next {
				a := postFrom(t, "127.0.0.66", base, fleetlock.PathPreReboot, fmt.Sprintf("flood-%d", i), "default")
				mu.Lock()
				kinds[a.Kind]++
				mu.Unlock()
			}
		})
	}
	for i := range 300 {
		next <- i
	}
	close(next)
	wg.Wait()
	_, w := f.queue(ctx, 1)
	if len(w) != maxWaiters {
		t.Fatalf("%d waiters after the flood, want %d (fleetlock.max_waiters)", len(w), maxWaiters)
	}
	if w[0].Node != "fleetlock:worker-1" {
		t.Fatalf("worker-1 lost its place: %v", names(w))
	}
	if kinds[string(fleetlock.KindQueueFull)] < 300-maxWaiters+1 || kinds["failed_lock_semaphore_full"] > maxWaiters-1 {
		t.Fatalf("answers %v", kinds)
	}
	leases, err := f.cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each queued client has its entry's lease and its wait timer.
	if grown := len(leases.Leases) - len(leasesBefore.Leases); grown > 2*(maxWaiters-1) {
		t.Fatalf("%d leases more after the flood, want at most %d", grown, 2*(maxWaiters-1))
	}
	if a := postFrom(t, "127.0.0.2", hs2.URL, fleetlock.PathPreReboot, "worker-1", "default"); a.Kind != "failed_lock_semaphore_full" {
		t.Fatalf("worker-1 asking again: %+v", a)
	}
	if !strings.Contains(f.buf.String(), "fleetlock.max_waiters clients wait already") {
		t.Error("refusals not logged")
	}
	// A refused client is not queued: an agent that comes now queues.
	holder.Release(ctx)
}

// TestEtcdMemberRefused: a FleetLock client that is an etcd member, by
// its address (a member URL's host) or by its id (a member's name), is
// refused before it is queued.
func TestEtcdMemberRefused(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 20*time.Second)
	_, hs := f.server(f.opts(1))
	name := f.c.Members[0].Name
	for _, tc := range []struct{ src, id string }{{"127.0.0.1", "worker-1"}, {"127.0.0.2", name}} {
		a := postFrom(t, tc.src, hs.URL, fleetlock.PathPreReboot, tc.id, "default")
		if a.Status != http.StatusForbidden || a.Kind != string(fleetlock.KindEtcdMember) || !strings.Contains(a.Value, name) {
			t.Fatalf("%s from %s: %+v, want client_is_etcd_member", tc.id, tc.src, a)
		}
	}
	if h, w := f.queue(ctx, 1); len(h)+len(w) != 0 {
		t.Fatalf("a member was queued: %v %v", names(h), names(w))
	}
	if a := postFrom(t, "127.0.0.2", hs.URL, fleetlock.PathPreReboot, "worker-1", "default"); !a.ok() {
		t.Fatalf("a worker: %+v", a)
	}
}

// TestAllowList: with fleetlock.allow_ids and allow_networks, a client
// must be in both; others get client_not_allowed and are not queued.
func TestAllowList(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 20*time.Second)
	o := f.opts(1)
	o.Allow = map[string]fleetlock.Allow{"default": {IDs: []string{"worker-1", "worker-2"},
		Networks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/30")}}}
	_, hs := f.server(o)
	for _, tc := range []struct{ src, id, kind string }{
		{"127.0.0.2", "intruder", string(fleetlock.KindNotAllowed)},
		{"127.0.0.66", "worker-2", string(fleetlock.KindNotAllowed)},
		{"127.0.0.2", "worker-1", ""},
		{"127.0.0.3", "worker-2", "failed_lock_semaphore_full"},
	} {
		if a := postFrom(t, tc.src, hs.URL, fleetlock.PathPreReboot, tc.id, "default"); a.Kind != tc.kind {
			t.Fatalf("%s from %s: %+v, want %q", tc.id, tc.src, a, tc.kind)
		}
	}
	h, w := f.queue(ctx, 1)
	if !slices.Equal(append(names(h), names(w)...), []string{"fleetlock:worker-1", "fleetlock:worker-2"}) {
		t.Fatalf("queue %v %v", names(h), names(w))
	}
}

// TestPlainHTTPWarning: serving plain HTTP where other hosts reach it is
// logged loudly at start; loopback is not.
func TestPlainHTTPWarning(t *testing.T) {
	for _, tc := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {"0.0.0.0:0", true}} {
		f := newFixture(t, 1)
		s, err := fleetlock.New(f.cli, f.opts(1))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln, nil) }()
		for !strings.Contains(f.buf.String(), "serving FleetLock") {
			sleep(ctx, t, 5*time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(f.buf.String(), "level=WARN msg=\"FLEETLOCK SERVED OVER PLAIN HTTP ON A NON-LOOPBACK ADDRESS"); got != tc.warn {
			t.Errorf("%s: warning logged %v, want %v:\n%s", tc.addr, got, tc.warn, f.buf.String())
		}
	}
}

// TestOlderEntryAdopted: an entry written by an older server records no
// client; the first client that asks for it becomes its owner, and a
// stranger's steady-state is refused from then on.
func TestOlderEntryAdopted(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 20*time.Second)
	_, hs := f.server(f.opts(1))
	key := lock.HoldersPrefix(prefix, "default") + lock.FleetLockNode("worker-1")
	rec := lock.Record{Node: lock.FleetLockNode("worker-1"), Kind: lock.KindFleetLock, QueuedAt: time.Now().UTC(),
		LastSeen: time.Now().UTC(), AcquiredAt: time.Now().UTC()}
	b, _ := json.Marshal(rec)
	lease, err := f.cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.Put(ctx, key, string(b), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if a := postFrom(t, "127.0.0.2", hs.URL, fleetlock.PathPreReboot, "worker-1", "default"); !a.ok() {
		t.Fatalf("worker-1 asking for its older entry: %+v", a)
	}
	if a := postFrom(t, "127.0.0.66", hs.URL, fleetlock.PathSteadyState, "worker-1", "default"); a.Kind != string(fleetlock.KindNotOwner) {
		t.Fatalf("stranger after worker-1 adopted its entry: %+v", a)
	}
	if a := postFrom(t, "127.0.0.2", hs.URL, fleetlock.PathSteadyState, "worker-1", "default"); !a.ok() {
		t.Fatal(a)
	}
}

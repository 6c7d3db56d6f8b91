package fleetlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/testlog"
)

const prefix = "/update-agent/lock"

type fixture struct {
	t     *testing.T
	c     *etcdtest.Cluster
	cli   *clientv3.Client
	log   *slog.Logger
	buf   *testlog.Buffer
	clock *clockwork.FakeClock
}

func newFixture(t *testing.T, members int) *fixture {
	c := etcdtest.Start(t, etcdtest.Options{Members: members})
	buf := &testlog.Buffer{}
	return &fixture{t: t, c: c, cli: c.Client(t, nil), buf: buf,
		log:   slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		clock: clockwork.NewFakeClockAt(time.Now())}
}

// counts records the metrics calls.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) FleetLockRequest(endpoint, kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[endpoint+" "+kind]++
}

func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func (f *fixture) opts(slots int) fleetlock.Options {
	return fleetlock.Options{Prefix: prefix, Groups: []string{"default"}, Slots: slots, TTL: 30 * time.Second,
		MaxHold: 2 * time.Hour, Clock: f.clock, Log: f.log, Metrics: &counts{},
		// Most test clients send from one address, many times: no rate limit
		// but where a test sets one.
		Rate: fleetlock.Rate{Burst: 1 << 20, Every: time.Millisecond}}
}

// server starts a FleetLock server behind an httptest server.
func (f *fixture) server(o fleetlock.Options) (*fleetlock.Server, *httptest.Server) {
	s, err := fleetlock.New(f.cli, o)
	if err != nil {
		f.t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	f.t.Cleanup(hs.Close)
	return s, hs
}

func (f *fixture) lock(node string, slots int) *lock.Lock {
	l, err := lock.New(f.cli, lock.Options{Prefix: prefix, Group: "default", Slots: slots, TTL: 30 * time.Second,
		Node: node, BootID: "boot-" + node, StateDir: f.t.TempDir(), Log: f.log})
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// answer is one HTTP answer: its status and error body.
type answer struct {
	Status int
	Kind   string `json:"kind"`
	Value  string `json:"value"`
}

func (a answer) ok() bool { return a.Status == http.StatusOK }

// defaultSource is the address test clients send from: not etcd's
// 127.0.0.1, whose members the server refuses as clients.
const defaultSource = "127.0.0.9"

var (
	clientsMu sync.Mutex
	clients   = map[string]*http.Client{}
)

// clientFrom is an HTTP client whose connections come from src, a
// loopback address: each test node is a peer of its own.
func clientFrom(src string) *http.Client {
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if c, ok := clients[src]; ok {
		return c
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
	clients[src] = c
	return c
}

// post sends one FleetLock request as zincati does.
func post(t testing.TB, base, path, id, group string) answer {
	return postFrom(t, defaultSource, base, path, id, group)
}

// postFrom sends one FleetLock request from the address src.
func postFrom(t testing.TB, src, base, path, id, group string) answer {
	b, _ := json.Marshal(map[string]any{"client_params": map[string]string{"id": id, "group": group}})
	return postVia(t, clientFrom(src), base+path, map[string]string{"fleet-lock-protocol": "true"}, b)
}

func postRaw(t testing.TB, url string, header map[string]string, body []byte) answer {
	return postVia(t, clientFrom(defaultSource), url, header, body)
}

func postVia(t testing.TB, c *http.Client, url string, header map[string]string, body []byte) answer {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{Status: resp.StatusCode}
	if a.Status != http.StatusOK {
		if err := json.Unmarshal(raw, &a); err != nil || a.Kind == "" || a.Value == "" {
			t.Errorf("error answer %d is not {kind, value}: %q", a.Status, raw)
		}
	}
	return a
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// queue is the group's queue as `update-agent lock status` reads it.
func (f *fixture) queue(ctx context.Context, slots int) (holders, waiters []lock.EntryStatus) {
	st, err := lock.Status(ctx, f.cli, prefix, slots, "default", time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	if len(st) == 0 {
		return nil, nil
	}
	return st[0].Holders, st[0].Waiters
}

func names(es []lock.EntryStatus) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Node)
	}
	return out
}

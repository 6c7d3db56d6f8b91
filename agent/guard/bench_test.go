//go:build bench

package guard_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// The guard's CPU in the stager: these benchmarks drive its production
// path (Inputs against a real etcd member's /metrics, Guard.Run ticking)
// so a profile shows where it goes. Figures are for comparing changes on
// one machine; claims about the guest live in `make bench`. Run:
// go test -tags bench -run '^$' -bench . -count 5 ./agent/guard/

var (
	etcdOnce    sync.Once
	etcdURL     string
	etcdBody    []byte
	etcdStarted error
)

// liveEtcd starts one embedded member (once per process), writes to it so
// its disk histograms have observations, and captures its /metrics.
func liveEtcd(b *testing.B) (string, []byte) {
	etcdOnce.Do(func() {
		// The member outlives this benchmark: later ones reuse it.
		c := etcdtest.Start(&keepTB{TB: b}, etcdtest.Options{Members: 1})
		cli := c.Client(&keepTB{TB: b}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := range 200 {
			if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
				etcdStarted = err
				return
			}
		}
		etcdURL = c.Members[0].ClientURL + "/metrics"
		resp, err := http.Get(etcdURL)
		if err != nil {
			etcdStarted = err
			return
		}
		defer resp.Body.Close()
		etcdBody, etcdStarted = io.ReadAll(resp.Body)
	})
	if etcdStarted != nil {
		b.Fatal(etcdStarted)
	}
	return etcdURL, etcdBody
}

// keepTB defers the cleanups registered with it (the member's shutdown,
// its temporary directories) to TestMain, after every benchmark ran: the
// member is shared by the benchmarks of one run.
type keepTB struct{ testing.TB }

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

func (k *keepTB) Cleanup(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

func (k *keepTB) TempDir() string {
	d, err := os.MkdirTemp("", "guard-bench")
	if err != nil {
		k.Fatal(err)
	}
	k.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestMain(m *testing.M) {
	code := m.Run()
	cleanupMu.Lock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanupMu.Unlock()
	os.Exit(code)
}

// BenchmarkParseEtcdMetrics: the parse of one real /metrics body, read
// whole (as Inputs reads it, into a kept buffer).
func BenchmarkParseEtcdMetrics(b *testing.B) {
	_, body := liveEtcd(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		h, err := guard.ParseHistogramBytes(body, guard.MetricWALFsync, guard.MetricBackendCommit)
		if err != nil || h[guard.MetricWALFsync].Total() == 0 {
			b.Fatalf("%v %v", h, err)
		}
	}
}

// servedMetrics serves a real member's /metrics body as etcd does (gzip
// when the client accepts it, as promhttp negotiates), compressed once, so
// a benchmark's figures are the guard's side, not etcd's rendering.
func servedMetrics(b *testing.B) (*httptest.Server, []byte) {
	_, body := liveEtcd(b)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(body)
	zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz.Bytes())
			return
		}
		w.Write(body)
	}))
	b.Cleanup(srv.Close)
	return srv, body
}

// BenchmarkReadServedMetrics: one scrape + parse through Inputs.Read of a
// real member's /metrics, served as etcd serves it (servedMetrics).
func BenchmarkReadServedMetrics(b *testing.B) {
	srv, body := servedMetrics(b)
	in := &guard.Inputs{MetricsURL: srv.URL}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if r, err := in.Read(context.Background()); err != nil || r.Hists == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadEtcdMetrics: the same against the live member; etcd runs in
// this process, so its rendering of /metrics is in the figures too.
func BenchmarkReadEtcdMetrics(b *testing.B) {
	url, _ := liveEtcd(b)
	in := &guard.Inputs{MetricsURL: url}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := in.Read(context.Background()); err != nil || r.Hists == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoopTick: one tick of Guard.Run as the stager runs it (250 ms
// interval, a disk's stat file and a PSI file read every tick, the rate
// controller on), one op per tick. "scrape-1s" scrapes the served /metrics
// every fourth tick as the stager does; "no-scrape" only the cheap inputs.
func BenchmarkLoopTick(b *testing.B) {
	srv, _ := servedMetrics(b)
	for _, tc := range []struct {
		name  string
		every time.Duration
	}{{"scrape-1s", time.Second}, {"no-scrape", 1000 * time.Hour}} {
		b.Run(tc.name, func(b *testing.B) { benchLoop(b, srv.URL, tc.every) })
	}
}

func benchLoop(b *testing.B, url string, every time.Duration) {
	root := b.TempDir()
	dev := filepath.Join(root, "block", "vda")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		b.Fatal(err)
	}
	stat := filepath.Join(dev, "stat")
	psi := filepath.Join(root, "io.pressure")
	write := func(name, s string) {
		if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	write(stat, "   14380        0  1037326     5132   191744    98260 12431688   853412        3   311012   861640        0        0        0        0    36140    48820\n")
	write(psi, "some avg10=1.17 avg60=0.41 avg300=0.27 total=835684276\nfull avg10=0.65 avg60=0.26 avg300=0.12 total=90024520\n")

	clk := clockwork.NewFakeClockAt(time.Unix(1_700_000_000, 0))
	in := &guard.Inputs{MetricsURL: url, MetricsEvery: every, SysRoot: root, Disks: []string{"vda"}, PressureFile: psi, Clock: clk}
	g, err := guard.New(guard.Options{
		Interval: 250 * time.Millisecond, Units: []string{"staging.service"}, Clock: clk,
		Log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Rate: guard.RateOptions{Set: func(context.Context, uint64) error { return nil }},
	}, in, nopFreezer{})
	if err != nil {
		b.Fatal(err)
	}
	base := guard.Baseline{guard.SignalWALFsync: {P99: 8 * time.Millisecond, Median: 2 * time.Millisecond, N: 100}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx, base); close(done) }()
	defer func() { cancel(); <-done }()
	b.ReportAllocs()
	for b.Loop() {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			b.Fatal(err)
		}
		clk.Advance(250 * time.Millisecond)
	}
}

type nopFreezer struct{}

func (nopFreezer) Freeze(context.Context, string) error { return nil }
func (nopFreezer) Thaw(context.Context, string) error   { return nil }

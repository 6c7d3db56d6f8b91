package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/guard"
)

func TestPacingNow(t *testing.T) {
	at := time.Unix(100, 0)
	for _, tc := range []struct {
		name string
		l    guard.Live
		want string
	}{
		{"no guard", guard.Live{Pacing: "fixed write cap"}, "fixed write cap · no latency guard"},
		{"guard before its first step", guard.Live{Pacing: "write rate loop", Guarded: true}, "write rate loop · guard starting"},
		{"iocost, brake off", guard.Live{Pacing: "iocost (vda learned)", Guarded: true, At: at, WALP99: 12 * time.Millisecond, WALBaseline: 10 * time.Millisecond},
			"iocost (vda learned) · brake off · etcd WAL p99 12 ms (baseline 10 ms, x1.2)"},
		{"rate loop braking", guard.Live{Pacing: "write rate loop", Guarded: true, At: at, Braking: true, Rate: 12 << 20, WALP99: 64 * time.Millisecond, WALBaseline: 2500 * time.Microsecond},
			"write rate loop · brake ON (staging frozen) · write rate 12.0 MiB/s · etcd WAL p99 64 ms (baseline 2.5 ms, x25.6)"},
		{"no fsync yet", guard.Live{Pacing: "no write cap", Guarded: true, At: at, WALBaseline: 10 * time.Millisecond},
			"no write cap · brake off · etcd WAL p99 not measured yet (baseline 10 ms)"},
		{"kernel signals only", guard.Live{Pacing: "no write cap", Guarded: true, At: at}, "no write cap · brake off · etcd WAL p99 not measured"},
		{"no baseline", guard.Live{Pacing: "no write cap", Guarded: true, At: at, WALP99: 3 * time.Millisecond}, "no write cap · brake off · etcd WAL p99 3.0 ms (no baseline)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pacingNow(tc.l); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// slowWAL is etcd with every WAL fsync in the 16-64 ms bucket.
type slowWAL struct {
	mu sync.Mutex
	n  uint64
}

func (s *slowWAL) Read(context.Context) (guard.Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += 50
	h := guard.Histogram{Bounds: []float64{0.001, 0.016, 0.064, 1e308}, Counts: []uint64{0, 0, s.n, s.n}}
	return guard.Reading{At: time.Now(), Hists: map[string]guard.Histogram{guard.MetricWALFsync: h}}, nil
}

type noFreezer struct{}

func (noFreezer) Freeze(context.Context, string) error { return nil }
func (noFreezer) Thaw(context.Context, string) error   { return nil }

// TestStatusShowsTheLiveBrake: the daemon's status answer carries what a
// running guard publishes on the agent's board (the one its stager gets),
// and `status` prints the brake's state from it.
func TestStatusShowsTheLiveBrake(t *testing.T) {
	cfg := config.Default()
	cfg.Agent.NodeName = "n1"
	cfg.Lock.Enabled = false
	a, err := wire(cfg, t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if r := a.report(context.Background()); r.Window != nil {
		t.Fatalf("a window before any opened: %+v", r.Window)
	}
	a.live.Open("write rate loop", time.Now())
	g, err := guard.New(guard.Options{LearnFor: -1, Interval: 10 * time.Millisecond, Window: 10 * time.Millisecond,
		Baseline: guard.Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}},
		Config:   guard.Config{MinFreeze: time.Second, MaxFreeze: 2 * time.Second},
		Units:    []string{"staging.service"}, Board: a.live, Log: a.log}, &slowWAL{}, noFreezer{})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := g.Adopt(nil, -1, "configured")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx, base) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		var b bytes.Buffer
		printStatus(&b, a.report(context.Background()), time.Now())
		if out = b.String(); strings.Contains(out, "brake ON") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out, "Pacing now:") || !strings.Contains(out, "write rate loop · brake ON (staging frozen) · etcd WAL p99 ") ||
		!strings.Contains(out, "(baseline 5.0 ms, x") {
		t.Errorf("status lacks the live brake:\n%s", out)
	}
}

package guard

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestClamp(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name    string
		in      Stat
		signal  string
		want    Stat
		clamped bool
		slow    bool
	}{
		{"a healthy WAL fsync is kept", Stat{P99: 8 * ms, Median: 2 * ms}, SignalWALFsync, Stat{P99: 8 * ms, Median: 2 * ms}, false, false},
		{"a slow but working disk (the TCG guest's 56ms) is kept, and said to be slow", Stat{P99: 56 * ms, Median: 5 * ms}, SignalWALFsync, Stat{P99: 56 * ms, Median: 5 * ms}, false, true},
		{"at the heartbeat interval it is still kept", Stat{P99: 100 * ms, Median: 30 * ms}, SignalWALFsync, Stat{P99: 100 * ms, Median: 30 * ms}, false, true},
		{"a sick disk (fsyncs longer than a heartbeat) is capped at 10x guidance", Stat{P99: 400 * ms, Median: 300 * ms}, SignalWALFsync, Stat{P99: 100 * ms, Median: 100 * ms}, true, false},
		{"backend commit is capped at 10 x 25ms", Stat{P99: 829 * ms, Median: 10 * ms}, "etcd_disk_backend_commit_duration_seconds", Stat{P99: 250 * ms, Median: 10 * ms}, true, false},
		{"disk await has no guidance", Stat{P99: 300 * ms, Median: 300 * ms}, "disk_await/vdb", Stat{P99: 300 * ms, Median: 300 * ms}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, clamped, slow := Clamp(Baseline{c.signal: c.in})
			if got[c.signal] != c.want || (len(clamped) > 0) != c.clamped || (len(slow) > 0) != c.slow {
				t.Errorf("got %+v clamped=%v slow=%v, want %+v clamped=%v slow=%v", got[c.signal], clamped, slow, c.want, c.clamped, c.slow)
			}
		})
	}
}

func hist(counts ...uint64) Histogram {
	return Histogram{Bounds: []float64{0.001, 0.002, 0.004, 0.008, math.Inf(1)}, Counts: counts}
}

func TestRollingDecaysAndGivesBaseline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var r Rolling
	if _, stall := r.Baseline(1); stall != -1 {
		t.Fatalf("empty record: stall %v, want -1", stall)
	}
	// An hour ago: 1000 fsyncs in the 4-8ms bucket (a busy moment).
	r = r.Add(t0, time.Minute, map[string]Histogram{MetricWALFsync: hist(0, 0, 0, 1000, 1000)}, 0.5, 30*time.Minute)
	// Now: 1000 fsyncs in the 1-2ms bucket; the old ones weigh a quarter.
	r = r.Add(t0.Add(time.Hour), time.Minute, map[string]Histogram{MetricWALFsync: hist(0, 1000, 1000, 1000, 1000)}, 0.1, 30*time.Minute)
	b, stall := r.Baseline(20)
	st := b[SignalWALFsync]
	if st.N != 1250 {
		t.Errorf("decayed observations %d, want 1250", st.N)
	}
	if st.Median < time.Millisecond || st.Median > 2*time.Millisecond {
		t.Errorf("median %s, want in the 1-2ms bucket", st.Median)
	}
	if st.P99 < 4*time.Millisecond || st.P99 > 8*time.Millisecond {
		t.Errorf("p99 %s, want in the 4-8ms bucket (the faded busy moment is still the tail)", st.P99)
	}
	// Stall: 0.5 weighted 60s*0.25, 0.1 weighted 60s: (7.5+6)/75 = 0.18.
	if math.Abs(stall-0.18) > 1e-9 {
		t.Errorf("stall %v, want 0.18", stall)
	}
	if r.Age(t0.Add(time.Hour+time.Minute)) != time.Minute {
		t.Errorf("age %s", r.Age(t0.Add(time.Hour+time.Minute)))
	}
	if b, _ := r.Baseline(5000); len(b) != 0 {
		t.Errorf("too few observations: got %v, want none", b)
	}
}

func TestKeeperLearnsOnlyWhileNotPausedAndPersists(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	lat := 3 * time.Millisecond
	src := &scriptSource{clk: clk, start: clk.Now(), latency: func(time.Duration) time.Duration { return lat }}
	file := filepath.Join(t.TempDir(), "baseline.json")
	k := &Keeper{Src: src, File: file, Clock: clk, SaveEvery: time.Minute}
	ctx := context.Background()
	step := func() {
		clk.Advance(time.Minute)
		if err := k.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Step(ctx); err != nil {
		t.Fatal(err)
	}
	step()
	step()
	b, _ := k.Record().Baseline(20)
	if got := b[SignalWALFsync]; got.P99 > 4*time.Millisecond || got.P99 < 2*time.Millisecond {
		t.Fatalf("learned p99 %s, want in the 2-4ms bucket", got.P99)
	}
	// A staging window: etcd slows down, but nothing of it is learned,
	// not even across the resume.
	resume := k.Pause()
	lat = 200 * time.Millisecond
	step()
	step()
	resume()
	step() // starts a new interval: the slow minutes are not in it
	lat = 3 * time.Millisecond
	step()
	b, _ = k.Record().Baseline(20)
	if got := b[SignalWALFsync]; got.P99 > 4*time.Millisecond {
		t.Fatalf("p99 %s after a paused window: the window was learned", got.P99)
	}
	// Persisted as every record is (0600): a new keeper (an agent
	// restart) starts with it.
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record %v, err %v: want mode 0600", fi, err)
	}
	k2 := &Keeper{File: file}
	if err := k2.Load(); err != nil {
		t.Fatal(err)
	}
	if k2.Record().Updated.IsZero() || len(k2.Record().Signals) == 0 {
		t.Fatalf("persisted record empty: %+v", k2.Record())
	}
}

package guard

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/guard/kernfstest"
)

// etcdMetrics renders the two histograms as etcd exposes them (etcd's
// buckets: 1ms doubling to 8.192s), from per-bucket counts.
func etcdMetrics(wal, commit []uint64) string {
	bounds := []string{"0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128", "0.256", "0.512", "1.024", "2.048", "4.096", "8.192", "+Inf"}
	var b strings.Builder
	b.WriteString("# HELP etcd_server_has_leader Whether or not a leader exists.\n# TYPE etcd_server_has_leader gauge\netcd_server_has_leader 1\n")
	for _, h := range []struct {
		name   string
		counts []uint64
	}{{MetricWALFsync, wal}, {MetricBackendCommit, commit}} {
		fmt.Fprintf(&b, "# HELP %s x\n# TYPE %s histogram\n", h.name, h.name)
		var cum uint64
		for i, le := range bounds {
			if i < len(h.counts) {
				cum += h.counts[i]
			}
			fmt.Fprintf(&b, "%s_bucket{le=%q} %d\n", h.name, le, cum)
		}
		fmt.Fprintf(&b, "%s_sum 1.5\n%s_count %d\n", h.name, h.name, cum)
	}
	return b.String()
}

func TestParseAndQuantile(t *testing.T) {
	// 100 WAL fsyncs: 50 under 1ms, 40 in 1-2ms, 9 in 2-4ms, 1 in 256-512ms.
	h, err := ParseHistograms(strings.NewReader(etcdMetrics([]uint64{50, 40, 9, 0, 0, 0, 0, 0, 0, 1}, []uint64{0, 0, 10})), MetricWALFsync, MetricBackendCommit, "absent")
	if err != nil {
		t.Fatal(err)
	}
	w := h[MetricWALFsync]
	if w.Total() != 100 || len(w.Bounds) != 15 {
		t.Fatalf("wal histogram %+v", w)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, time.Millisecond},         // 50th observation ends the first bucket
		{0.7, 1500 * time.Microsecond},  // half way through 1-2ms
		{0.99, 4 * time.Millisecond},    // the 99th is the last in 2-4ms
		{0.995, 384 * time.Millisecond}, // half way through 256-512ms
		{1, 512 * time.Millisecond},
	} {
		got, ok := w.Quantile(tc.q)
		if !ok || (got-tc.want).Abs() > time.Microsecond {
			t.Errorf("q%g = %v %v, want %v", tc.q, got, ok, tc.want)
		}
	}
	if _, ok := (Histogram{}).Quantile(0.5); ok {
		t.Error("quantile of nothing")
	}
	if _, ok := h["absent"]; ok {
		t.Error("absent metric returned")
	}
	// +Inf bucket: reported as the largest finite bound.
	inf := Histogram{Bounds: w.Bounds, Counts: make([]uint64, 15)}
	inf.Counts[14] = 3
	if got, _ := inf.Quantile(0.99); got != 8192*time.Millisecond {
		t.Errorf("+Inf quantile %v", got)
	}
}

func TestHistogramSub(t *testing.T) {
	a := Histogram{Bounds: []float64{0.001, 0.002, 1e300}, Counts: []uint64{5, 8, 10}}
	b := Histogram{Bounds: a.Bounds, Counts: []uint64{6, 12, 20}}
	d := b.Sub(a)
	if fmt.Sprint(d.Counts) != "[1 4 10]" {
		t.Errorf("delta %v", d.Counts)
	}
	// etcd restarted: counters went back; the new histogram is all we know.
	if r := a.Sub(b); fmt.Sprint(r.Counts) != "[5 8 10]" {
		t.Errorf("reset delta %v", r.Counts)
	}
	if r := b.Sub(Histogram{}); r.Total() != 20 {
		t.Errorf("delta from nothing %v", r.Counts)
	}
}

func TestParseDiskStat(t *testing.T) {
	// 17 fields (kernel >= 5.5): reads, writes, in_flight, io_ticks, flushes.
	d, err := ParseDiskStat("    100 0 800 50 200 10 1600 450 3 400 520 0 0 0 0 50 100\n")
	if err != nil {
		t.Fatal(err)
	}
	if d != (DiskStat{IOs: 350, TicksMS: 600, InFlight: 3, BusyMS: 400, Written: 1600 * 512, QueueMS: 520}) {
		t.Errorf("17 fields: %+v", d)
	}
	d11, err := ParseDiskStat("100 0 800 50 200 10 1600 450 3 400 520")
	if err != nil || d11 != (DiskStat{IOs: 300, TicksMS: 500, InFlight: 3, BusyMS: 400, Written: 1600 * 512, QueueMS: 520}) {
		t.Errorf("11 fields: %+v %v", d11, err)
	}
	if _, err := ParseDiskStat("1 2 3"); err == nil {
		t.Error("short line accepted")
	}
	later := DiskStat{IOs: 450, TicksMS: 1600}
	if aw, n, ok := later.Await(d); !ok || n != 100 || aw != 10*time.Millisecond {
		t.Errorf("await %v %d %v", aw, n, ok)
	}
	if _, _, ok := d.Await(d); ok {
		t.Error("await without completions")
	}
}

func TestParseCPUStatUsage(t *testing.T) {
	d, err := ParseCPUStatUsage([]byte("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n"))
	if err != nil || d != 1500*time.Millisecond {
		t.Errorf("got %v, %v", d, err)
	}
	for _, bad := range []string{"user_usec 1\n", "usage_usec lots\n", ""} {
		if _, err := ParseCPUStatUsage([]byte(bad)); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

func TestParsePressure(t *testing.T) {
	p, err := ParsePressure("some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n")
	if err != nil || p.SomeTotal != 2500*time.Millisecond || p.FullTotal != time.Second {
		t.Fatalf("%+v %v", p, err)
	}
	later := Pressure{SomeTotal: 3 * time.Second}
	if s := later.StallShare(p, time.Second); s != 0.5 {
		t.Errorf("stall share %g", s)
	}
	if s := later.StallShare(p, 100*time.Millisecond); s != 1 {
		t.Errorf("stall share not clamped: %g", s)
	}
	if _, err := ParsePressure("garbage"); err == nil {
		t.Error("garbage accepted")
	}
}

func TestInputsAndWindow(t *testing.T) {
	counts := []uint64{100}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, etcdMetrics(counts, []uint64{10}))
	}))
	defer srv.Close()
	sys := t.TempDir()
	statFile := filepath.Join(sys, "block", "vdb", "stat")
	os.MkdirAll(filepath.Dir(statFile), 0o755)
	os.WriteFile(statFile, []byte("0 0 0 0 100 0 0 200 0 0 0\n"), 0o644)
	psi := filepath.Join(sys, "io.pressure")
	os.WriteFile(psi, []byte("some avg10=0 avg60=0 avg300=0 total=0\nfull avg10=0 avg60=0 avg300=0 total=0\n"), 0o644)
	cpu := filepath.Join(sys, "cpu.pressure")
	os.WriteFile(cpu, []byte("some avg10=0 avg60=0 avg300=0 total=1000000\nfull avg10=0 avg60=0 avg300=0 total=0\n"), 0o644)

	clk := clockwork.NewFakeClockAt(t0)
	in := &Inputs{MetricsURL: srv.URL, SysRoot: sys, Disks: []string{"vdb"}, PressureFile: psi, CPUPressureFile: cpu, Clock: clk, pread: kernfstest.Pread}
	w := Window{Span: time.Second}
	r, err := in.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Add(r); ok {
		t.Error("a sample from one reading")
	}
	// One second later: 10 more WAL fsyncs, 8 fast and 2 in 64-128ms; 50
	// disk writes that took 20ms each; I/O stalled 250ms; etcd waited for
	// a CPU 400ms.
	counts = []uint64{108, 0, 0, 0, 0, 0, 0, 2}
	os.WriteFile(statFile, []byte("0 0 0 0 150 0 0 1200 0 0 0\n"), 0o644)
	os.WriteFile(psi, []byte("some avg10=0 avg60=0 avg300=0 total=250000\n"), 0o644)
	os.WriteFile(cpu, []byte("some avg10=0 avg60=0 avg300=0 total=1400000\nfull avg10=0 avg60=0 avg300=0 total=0\n"), 0o644)
	clk.Advance(time.Second)
	r, err = in.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, ok := w.Add(r)
	if !ok {
		t.Fatal("no sample")
	}
	walSt := s.Latency["wal_fsync"]
	if walSt.N != 10 || walSt.Median > time.Millisecond || walSt.P99 < 64*time.Millisecond || walSt.P99 > 128*time.Millisecond {
		t.Errorf("wal %+v", walSt)
	}
	if c := s.Latency["backend_commit"]; c.N != 0 {
		t.Errorf("commit %+v", c)
	}
	if d := s.Kernel["disk_await/vdb"]; d != (Stat{P99: 20 * time.Millisecond, Median: 20 * time.Millisecond, N: 50}) {
		t.Errorf("disk %+v", d)
	}
	if s.Stall != 0.25 || s.CPUWait != 0.4 {
		t.Errorf("stall %g, CPU wait %g, want 0.25 and 0.4", s.Stall, s.CPUWait)
	}
	b := BaselineFrom(s, 10)
	if _, ok := b["wal_fsync"]; !ok || len(b) != 2 {
		t.Errorf("baseline %v", b)
	}

	// Failing inputs: partial reading and an error naming each.
	srv.Close()
	os.Remove(psi)
	os.WriteFile(cpu, []byte("some nonsense\n"), 0o644)
	r, err = in.Read(context.Background())
	if err == nil || !strings.Contains(err.Error(), "etcd metrics") || !strings.Contains(err.Error(), "io.pressure") || !strings.Contains(err.Error(), "cpu.pressure") {
		t.Errorf("err %v", err)
	}
	if r.Pressure != nil || r.CPUPressure != nil {
		t.Errorf("pressure read from a failing file: %+v %+v", r.Pressure, r.CPUPressure)
	}
	if _, ok := r.Disks["vdb"]; !ok {
		t.Error("disk stat lost with the other inputs")
	}
}

func TestWindowSpanAndCut(t *testing.T) {
	w := Window{Span: 2 * time.Second}
	h := func(n uint64) map[string]Histogram {
		return map[string]Histogram{MetricWALFsync: {Bounds: []float64{0.001, 1e308}, Counts: []uint64{n, n}}}
	}
	for i := 0; i <= 4; i++ {
		s, ok := w.Add(Reading{At: t0.Add(time.Duration(i) * time.Second), Hists: h(uint64(10 * i))})
		if i == 0 {
			continue
		}
		want := uint64(10 * min(i, 2))
		if !ok || s.Latency["wal_fsync"].N != want {
			t.Errorf("reading %d: n=%d, want %d", i, s.Latency["wal_fsync"].N, want)
		}
	}
	w.Cut()
	s, _ := w.Add(Reading{At: t0.Add(4500 * time.Millisecond), Hists: h(45)})
	if s.Latency["wal_fsync"].N != 5 {
		t.Errorf("after cut n=%d, want 5 (only since the last reading)", s.Latency["wal_fsync"].N)
	}
}

// TestWindowSkipsFailedScrapeAsBase: a reading whose scrape failed (no
// histograms) is never the base of a sample while a later one has them;
// the sample then spans less, but still has etcd's latency.
func TestWindowSkipsFailedScrapeAsBase(t *testing.T) {
	w := Window{Span: 2 * time.Second}
	h := func(n uint64) map[string]Histogram {
		return map[string]Histogram{MetricWALFsync: {Bounds: []float64{0.001, 1e308}, Counts: []uint64{n, n}}}
	}
	w.Add(Reading{At: t0, Hists: h(0)})
	w.Add(Reading{At: t0.Add(time.Second)}) // the scrape failed
	w.Add(Reading{At: t0.Add(2 * time.Second), Hists: h(20)})
	s, ok := w.Add(Reading{At: t0.Add(3 * time.Second), Hists: h(30)})
	if st, has := s.Latency["wal_fsync"]; !ok || !has || st.N != 10 {
		t.Errorf("sample %v, want wal_fsync over the last second (n=10), not nothing from the failed base", s.Latency)
	}
	if _, has := s.Hists["wal_fsync"]; !has {
		t.Error("no histogram in the sample")
	}
}

func TestMetricsEverySpacesScrapes(t *testing.T) {
	scrapes := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		scrapes++
		fmt.Fprint(w, etcdMetrics([]uint64{uint64(10 * scrapes), 0, 0, 0, 0, 0, 0, 0}, []uint64{10}))
	}))
	defer srv.Close()
	clk := clockwork.NewFakeClockAt(t0)
	in := &Inputs{MetricsURL: srv.URL, MetricsEvery: time.Second, Clock: clk}
	var got []uint64
	for i := 0; i < 6; i++ { // every 250ms for 1.25s
		r, err := in.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Hists[MetricWALFsync].Total())
		clk.Advance(250 * time.Millisecond)
	}
	if scrapes != 2 || fmt.Sprint(got) != "[10 10 10 10 20 20]" {
		t.Errorf("%d scrapes, WAL totals %v; want 2 scrapes, [10 10 10 10 20 20]", scrapes, got)
	}
	// A read a hair early (the last one's tick came late) scrapes: the
	// next tick would be a quarter of a second late.
	clk.Advance(495 * time.Millisecond) // 995 ms after the last scrape
	if _, err := in.Read(context.Background()); err != nil || scrapes != 3 {
		t.Errorf("%d scrapes (%v) for a read 995 ms after the last, want 3", scrapes, err)
	}
}

// TestMetricsBodyBounded: a /metrics body past MaxMetricsBody is refused
// with a clear error rather than read whole; one at the cap is parsed.
func TestMetricsBodyBounded(t *testing.T) {
	valid := etcdMetrics([]uint64{10, 0, 0, 0, 0, 0, 0, 0}, []uint64{10})
	pad := func(n int) string {
		// Comment lines: valid exposition format, ignored by the parser.
		line := "# " + strings.Repeat("x", 1021) + "\n"
		return strings.Repeat(line, n/len(line)) + strings.Repeat("\n", n%len(line))
	}
	for _, tt := range []struct {
		name string
		body string
		want string
	}{
		{"at the cap", valid + pad(MaxMetricsBody-len(valid)), ""},
		{"one byte over", valid + pad(MaxMetricsBody-len(valid)+1), fmt.Sprintf("body larger than %d bytes", MaxMetricsBody)},
		{"endless", "", fmt.Sprintf("body larger than %d bytes", MaxMetricsBody)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tt.body != "" {
					io.WriteString(w, tt.body)
					return
				}
				line := []byte("# " + strings.Repeat("y", 4093) + "\n")
				for {
					if _, err := w.Write(line); err != nil {
						return // the client hung up
					}
				}
			}))
			defer srv.Close()
			in := &Inputs{MetricsURL: srv.URL, HTTP: &http.Client{Timeout: 30 * time.Second}}
			r, err := in.Read(context.Background())
			if tt.want == "" {
				if err != nil || r.Hists[MetricWALFsync].Total() != 10 {
					t.Fatalf("err %v, WAL total %d; want the histogram", err, r.Hists[MetricWALFsync].Total())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v; want %q", err, tt.want)
			}
		})
	}
}

func TestParseHistogramsReadsOnlyItsFamilies(t *testing.T) {
	in := `# TYPE etcd_disk_wal_fsync_duration_seconds histogram
etcd_disk_wal_fsync_duration_seconds_bucket{le="0.001"} 2
etcd_disk_wal_fsync_duration_seconds_bucket{le="0.002"} 5
etcd_disk_wal_fsync_duration_seconds_sum 0.01
etcd_disk_wal_fsync_duration_seconds_count 6
etcd_disk_wal_fsync_duration_seconds_extra_bucket{le="0.001"} 1000
etcd_disk_backend_commit_duration_seconds_bucket{db="a",le="0.004"} 1 1700000000000
etcd_disk_backend_commit_duration_seconds_bucket{db="b",le="0.004"} 3
etcd_disk_backend_commit_duration_seconds_bucket{le="+Inf",db="a"} 1
etcd_disk_backend_commit_duration_seconds_bucket{le="+Inf",db="b"} 4
some_other_family{le="not a number"} garbage
`
	h, err := ParseHistograms(strings.NewReader(in), MetricWALFsync, MetricBackendCommit)
	if err != nil {
		t.Fatal(err)
	}
	// No +Inf bucket line: _count stands in for it; a family whose name
	// merely starts with ours is not ours.
	w := h[MetricWALFsync]
	if fmt.Sprint(w.Counts) != "[2 5 6]" || !math.IsInf(w.Bounds[2], 1) {
		t.Errorf("wal %+v", w)
	}
	// Label sets summed per le.
	if c := h[MetricBackendCommit]; fmt.Sprint(c.Bounds[:1], c.Counts) != "[0.004] [4 5]" {
		t.Errorf("backend commit %+v", c)
	}
	for _, bad := range []string{
		`etcd_disk_wal_fsync_duration_seconds_bucket{le="x"} 1`,
		`etcd_disk_wal_fsync_duration_seconds_bucket{le="0.1"} -1`,
		`etcd_disk_wal_fsync_duration_seconds_bucket{xle="0.1"} 1`,
		`etcd_disk_wal_fsync_duration_seconds_bucket{le="0.1" 1`,
	} {
		if _, err := ParseHistograms(strings.NewReader(bad), MetricWALFsync); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// A window's p99 of a few observations is their second slowest: one slow
// fsync among 25 is above a well-learned p99 by chance in one window of
// five, two in one of forty.
func TestDeltaTailIgnoresALoneSlowFsync(t *testing.T) {
	b := []float64{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, math.Inf(1)}
	at := func(counts ...uint64) Reading {
		var cum []uint64
		var c uint64
		for i := range b {
			if i < len(counts) {
				c += counts[i]
			}
			cum = append(cum, c)
		}
		return Reading{At: t0, Hists: map[string]Histogram{MetricWALFsync: {Bounds: b, Counts: cum}}}
	}
	zero := at()
	for _, c := range []struct {
		name     string
		r        Reading
		min, max time.Duration
	}{
		{"24 fast, 1 slow: the slow one is noise", at(24, 0, 0, 0, 0, 0, 0, 1), 0, time.Millisecond},
		{"23 fast, 2 slow: congestion shows", at(23, 0, 0, 0, 0, 0, 0, 2), 64 * time.Millisecond, 128 * time.Millisecond},
		{"198 fast, 2 slow over 200: the p99 itself", at(198, 0, 0, 0, 0, 0, 0, 2), 0, time.Millisecond},
		{"197 fast, 3 slow over 200: the p99 itself", at(197, 0, 0, 0, 0, 0, 0, 3), 64 * time.Millisecond, 128 * time.Millisecond},
	} {
		st := Delta(zero, c.r).Latency[SignalWALFsync]
		if st.P99 < c.min || st.P99 > c.max {
			t.Errorf("%s: p99 %v, want %v..%v", c.name, st.P99, c.min, c.max)
		}
	}
}

// After a failed scrape the window's difference is unknown, not etcd's
// lifetime histogram.
func TestDeltaAfterAFailedScrapeIsUnknown(t *testing.T) {
	b := []float64{0.001, 0.5, math.Inf(1)}
	cur := Reading{At: t0, Hists: map[string]Histogram{MetricWALFsync: {Bounds: b, Counts: []uint64{3000, 3682, 3682}}}}
	if st, ok := Delta(Reading{}, cur).Latency[SignalWALFsync]; ok {
		t.Errorf("after a failed scrape: %+v, want no observations", st)
	}
	prev := Reading{Hists: map[string]Histogram{MetricWALFsync: {Bounds: b, Counts: []uint64{2990, 3670, 3670}}}}
	if st := Delta(prev, cur).Latency[SignalWALFsync]; st.N != 12 {
		t.Errorf("after a good scrape: %+v, want 12 observations", st)
	}
}

// A scrape etcd does not answer in time is a sign of its own; one the
// caller cut short (a freeze ending) is not.
func TestReadMarksAMetricsTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	in := &Inputs{MetricsURL: srv.URL, HTTP: &http.Client{Timeout: 50 * time.Millisecond}}
	r, err := in.Read(context.Background())
	if err == nil || !r.MetricsTimeout {
		t.Errorf("etcd silent past the client's timeout: MetricsTimeout %v, err %v", r.MetricsTimeout, err)
	}
	if s := Delta(Reading{}, r); !s.MetricsTimeout {
		t.Error("the sample lost the timeout")
	}
	in = &Inputs{MetricsURL: srv.URL, HTTP: &http.Client{Timeout: time.Minute}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r, err := in.Read(ctx); err == nil || r.MetricsTimeout {
		t.Errorf("read cut short by its caller: MetricsTimeout %v, err %v", r.MetricsTimeout, err)
	}
	refused := &Inputs{MetricsURL: "http://127.0.0.1:1/metrics"}
	if r, err := refused.Read(context.Background()); err == nil || r.MetricsTimeout {
		t.Errorf("etcd not listening: MetricsTimeout %v, err %v", r.MetricsTimeout, err)
	}
}

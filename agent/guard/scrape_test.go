package guard

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// noisyMetrics is etcdMetrics among many other families, as etcd's
// /metrics has them: histograms and counters whose names share a prefix
// with the guard's, label sets, and values the guard must never parse.
func noisyMetrics(wal, commit []uint64) string {
	var b strings.Builder
	for i := range 500 {
		fmt.Fprintf(&b, "# HELP go_gc_x%d x\n# TYPE go_gc_x%d gauge\ngo_gc_x%d{kind=\"a\"} %d\n", i, i, i, i)
		fmt.Fprintf(&b, "etcd_disk_defrag_x%d_bucket{le=\"0.001\"} not-a-number\n", i)
		fmt.Fprintf(&b, "%s_other_bucket{le=\"0.001\"} %d\n", MetricWALFsync, i)
		fmt.Fprintf(&b, "etcd_network_peer_round_trip_time_seconds_bucket{To=\"m%d\",le=\"0.0001\"} 7\n", i)
	}
	b.WriteString(etcdMetrics(wal, commit))
	b.WriteString("process_cpu_seconds_total 1.5\n")
	return b.String()
}

// The scrape parses exactly the guard's two families out of a body full of
// others: both come through whole, nothing else does.
func TestScrapeParsesOnlyTheUsedFamilies(t *testing.T) {
	body := noisyMetrics([]uint64{5, 3, 0, 0, 1}, []uint64{2, 2})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	in := &Inputs{MetricsURL: srv.URL}
	r, err := in.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Hists) != 2 {
		t.Errorf("families %d, want 2: %v", len(r.Hists), r.Hists)
	}
	w, c := r.Hists[MetricWALFsync], r.Hists[MetricBackendCommit]
	if len(w.Bounds) != 15 || w.Total() != 9 || w.Counts[1] != 8 {
		t.Errorf("wal %+v", w)
	}
	if len(c.Bounds) != 15 || c.Total() != 4 {
		t.Errorf("backend commit %+v", c)
	}
}

// Other families' lines are skipped before any allocation: a scrape of
// a body with 2,000 of them allocates a bounded few (the HTTP exchange,
// the server's side of it in this process, the used families' lines),
// not one per line as a string per line did.
func TestScrapeAllocationsDoNotGrowWithOtherFamilies(t *testing.T) {
	body := noisyMetrics([]uint64{5, 3}, []uint64{2})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	in := &Inputs{MetricsURL: srv.URL}
	allocs := testing.AllocsPerRun(20, func() {
		if r, err := in.Read(context.Background()); err != nil || len(r.Hists) != 2 {
			t.Fatalf("%v %v", r.Hists, err)
		}
	})
	t.Logf("%.0f allocations a scrape, %d bytes", allocs, len(body))
	// Measured: 135. One string per line was 3,163.
	if allocs > 400 {
		t.Errorf("%.0f allocations a scrape, want <= 400", allocs)
	}
	parse := testing.AllocsPerRun(20, func() {
		if _, err := ParseHistograms(strings.NewReader(body), MetricWALFsync, MetricBackendCommit); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations a parse", parse)
	// Measured: 55 (the two families' 32 bucket and count lines, their
	// maps and results); one string per line was 3,081.
	if parse > 100 {
		t.Errorf("%.0f allocations a parse, want <= 100", parse)
	}
}

// The scrape asks for plain text: etcd's promhttp gzips for a client
// that accepts it, which Go's transport does unless told otherwise, and
// the deflate and inflate of ~180 KB a second cost both processes CPU.
func TestScrapeAsksForPlainText(t *testing.T) {
	plain := etcdMetrics([]uint64{5}, []uint64{1})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(plain))
	zw.Close()
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Header.Get("Accept-Encoding"))
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz.Bytes())
			return
		}
		fmt.Fprint(w, plain)
	}))
	defer srv.Close()
	in := &Inputs{MetricsURL: srv.URL}
	r, err := in.Read(context.Background())
	if err != nil || r.Hists[MetricWALFsync].Total() != 5 {
		t.Fatalf("%v %v", r.Hists, err)
	}
	if len(asked) != 1 || strings.Contains(asked[0], "gzip") {
		t.Errorf("Accept-Encoding %q, want no gzip", asked)
	}
}

// The kernel files are read into a reused buffer: a file longer than it
// is read whole, and a shorter one read after it is not mixed with it.
func TestKernelFilesReadWholeIntoTheReusedBuffer(t *testing.T) {
	dir := t.TempDir()
	psi := filepath.Join(dir, "io.pressure")
	long := strings.Repeat("\n", 9000) + "some avg10=0 avg60=0 avg300=0 total=2000000\nfull avg10=0 avg60=0 avg300=0 total=1000000\n"
	if err := os.WriteFile(psi, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	in := &Inputs{PressureFile: psi}
	r, err := in.Read(context.Background())
	if err != nil || r.Pressure == nil || r.Pressure.SomeTotal.Seconds() != 2 || r.Pressure.FullTotal.Seconds() != 1 {
		t.Fatalf("%+v %v", r.Pressure, err)
	}
	if err := os.WriteFile(psi, []byte("some avg10=0 avg60=0 avg300=0 total=3000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = in.Read(context.Background())
	if err != nil || r.Pressure == nil || r.Pressure.SomeTotal.Seconds() != 3 || r.Pressure.FullTotal != 0 {
		t.Fatalf("%+v %v", r.Pressure, err)
	}
	os.Remove(psi)
	if _, err := in.Read(context.Background()); err == nil || !strings.Contains(err.Error(), "open "+psi+": no such file") {
		t.Errorf("err %v, want the open error naming the file", err)
	}
}

// readCounter is a connection whose peer has already written a whole
// response: each Read returns what fits, and the reads are counted.
type readCounter struct {
	net.Conn // nil: only Read, Write, Close and the deadlines are used
	r        *bytes.Reader
	reads    int
}

func (c *readCounter) Read(p []byte) (int, error)       { c.reads++; return c.r.Read(p) }
func (c *readCounter) Write(p []byte) (int, error)      { return len(p), nil }
func (c *readCounter) Close() error                     { return nil }
func (c *readCounter) SetDeadline(time.Time) error      { return nil }
func (c *readCounter) SetReadDeadline(time.Time) error  { return nil }
func (c *readCounter) SetWriteDeadline(time.Time) error { return nil }
func (c *readCounter) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *readCounter) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// The scrape reads etcd's chunked ~180 KB in a few read(2) calls, not one
// per 4 KB chunk (each was dear in the TCG guest).
func TestScrapeReadsTheBodyInFewCalls(t *testing.T) {
	body := noisyMetrics([]uint64{5, 3}, []uint64{2})
	for len(body) < 180<<10 {
		body = "# HELP filler x\n" + strings.Repeat("go_filler_metric{a=\"b\"} 1\n", 1000) + body
	}
	var resp bytes.Buffer
	resp.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
	for rest := body; len(rest) > 0; {
		n := min(len(rest), 4096) // as Go's server chunks etcd's response
		fmt.Fprintf(&resp, "%x\r\n%s\r\n", n, rest[:n])
		rest = rest[n:]
	}
	resp.WriteString("0\r\n\r\n")
	scrape := func(c *http.Client, conn *readCounter) int {
		in := &Inputs{MetricsURL: "http://etcd.invalid:2381/metrics", HTTP: c}
		r, err := in.Read(context.Background())
		if err != nil || len(r.Hists) != 2 {
			t.Fatalf("scrape: %v %v", r.Hists, err)
		}
		return conn.reads
	}
	dialer := func(conn *readCounter) func(context.Context, string, string) (net.Conn, error) {
		return func(context.Context, string, string) (net.Conn, error) { return conn, nil }
	}
	ours := &readCounter{r: bytes.NewReader(resp.Bytes())}
	n := scrape(newScrapeClient(dialer(ours)), ours)
	def := &readCounter{r: bytes.NewReader(resp.Bytes())}
	t4k := http.DefaultTransport.(*http.Transport).Clone()
	t4k.DialContext = dialer(def)
	n4k := scrape(&http.Client{Transport: t4k}, def)
	if n > 4 || n4k < 40 {
		t.Errorf("read(2) calls for a %d KB body: %d, want at most 4 (with the default 4 KB buffer: %d)", len(body)>>10, n, n4k)
	}
}

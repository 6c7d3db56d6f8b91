package guard

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	in := &Inputs{PressureFile: psi, pread: preadLikeKernfs}
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

// readCounter counts the reads of a connection.
type readCounter struct {
	net.Conn
	reads atomic.Int64
}

func (c *readCounter) Read(p []byte) (int, error) { c.reads.Add(1); return c.Conn.Read(p) }

// The scrape reads etcd's ~180 KB in a few read(2) calls even when etcd
// writes it 4 KB at a time as it renders (each read was a wake-up of Go's
// scheduler and netpoller, dear in the TCG guest): the reader is woken at
// the socket's low-water mark or the server's close, not per chunk.
func TestScrapeReadsTheBodyInFewCalls(t *testing.T) {
	body := noisyMetrics([]uint64{5, 3}, []uint64{2})
	for len(body) < 180<<10 {
		body = "# HELP filler x\n" + strings.Repeat("go_filler_metric{a=\"b\"} 1\n", 1000) + body
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As etcd under load: a chunk, flushed, then a pause while it
		// renders the next; the reader is faster than the writer.
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 4096)
			io.WriteString(w, rest[:n])
			w.(http.Flusher).Flush()
			rest = rest[n:]
			time.Sleep(time.Millisecond)
		}
	}))
	defer srv.Close()
	scrape := func(c *http.Client) {
		in := &Inputs{MetricsURL: srv.URL + "/metrics", HTTP: c}
		r, err := in.Read(context.Background())
		if err != nil || len(r.Hists) != 2 {
			t.Fatalf("scrape: %v %v", r.Hists, err)
		}
	}
	var conns []*readCounter
	count := func(c net.Conn) net.Conn { rc := &readCounter{Conn: c}; conns = append(conns, rc); return rc }
	client := newScrapeClient(count)
	for range 2 { // a connection each
		scrape(client)
	}
	if len(conns) != 2 {
		t.Fatalf("%d connections for 2 scrapes, want one each (closed by the server after its response)", len(conns))
	}
	// The same trickle through the plain transport with the same buffer:
	// what the low-water mark saves.
	plain := http.DefaultTransport.(*http.Transport).Clone()
	plain.ReadBufferSize = scrapeReadBuffer
	var plainConn *readCounter
	plain.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		plainConn = &readCounter{Conn: c}
		return plainConn, nil
	}
	scrape(&http.Client{Transport: plain})
	for i, c := range conns {
		if n := c.reads.Load(); n > 10 {
			t.Errorf("scrape %d: %d read(2) calls for a %d KB body written 4 KB at a time, want at most 10 (plain transport: %d)", i+1, n, len(body)>>10, plainConn.reads.Load())
		}
	}
	if n := plainConn.reads.Load(); n < 20 {
		t.Errorf("the plain transport read the trickle in %d calls: the test no longer shows a trickle", n)
	}
}

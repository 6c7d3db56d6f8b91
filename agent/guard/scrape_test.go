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

	"github.com/update-agent/update-agent/agent/guard/kernfstest"
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
	b := []byte(body)
	parse := testing.AllocsPerRun(20, func() {
		if _, err := parseHistograms(b, usedHists); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations a parse", parse)
	// Measured: 53 (the two families' 32 bucket and count lines, their
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
	in := &Inputs{PressureFile: psi, pread: kernfstest.Pread}
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

// trickle serves body as etcd does under load: a 4 KB chunk, flushed,
// then a pause while it renders the next; the reader is faster than the
// writer. body() is called for each request.
func trickle(body func() string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for rest := body(); len(rest) > 0; {
			n := min(len(rest), 4096)
			io.WriteString(w, rest[:n])
			w.(http.Flusher).Flush()
			rest = rest[n:]
			time.Sleep(time.Millisecond)
		}
	}))
}

// bigMetrics is noisyMetrics grown past size with other families.
func bigMetrics(size int) string {
	body := noisyMetrics([]uint64{5, 3}, []uint64{2})
	for len(body) < size {
		body = "# HELP filler x\n" + strings.Repeat("go_filler_metric{a=\"b\"} 1\n", 1000) + body
	}
	return body
}

// countingClient is the scrape client with each connection's reads counted.
func countingClient() (*http.Client, *[]*readCounter) {
	var conns []*readCounter
	return newScrapeClient(func(c net.Conn) net.Conn { rc := &readCounter{Conn: c}; conns = append(conns, rc); return rc }), &conns
}

func scrapeWith(t *testing.T, c *http.Client, url string) {
	t.Helper()
	in := &Inputs{MetricsURL: url + "/metrics", HTTP: c}
	r, err := in.Read(context.Background())
	if err != nil || len(r.Hists) != 2 {
		t.Fatalf("scrape: %v %v", r.Hists, err)
	}
}

// The scrape keeps its connection and reads etcd's ~180 KB in a few
// read(2) calls even when etcd writes it 4 KB at a time as it renders
// (each read was a wake-up of Go's scheduler and netpoller, and each
// connection a dial and a close, dear in the TCG guest): the reader is
// woken near the end of the response (the low-water mark a little below
// the last response's size), not per chunk.
func TestScrapeReadsTheBodyInFewCalls(t *testing.T) {
	body := bigMetrics(180 << 10)
	srv := trickle(func() string { return body })
	defer srv.Close()
	client, conns := countingClient()
	var reads []int64
	for range 4 {
		scrapeWith(t, client, srv.URL)
		if len(*conns) != 1 {
			t.Fatalf("%d connections for %d scrapes, want one kept", len(*conns), len(reads)+1)
		}
		reads = append(reads, (*conns)[0].reads.Load())
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
	scrapeWith(t, &http.Client{Transport: plain}, srv.URL)
	t.Logf("read(2) calls after each scrape %v; plain transport %d", reads, plainConn.reads.Load())
	// The first response has no size to go by; the next ones each take a
	// wake-up at the mark, one for the tail, and the read the transport
	// leaves waiting for the next response (measured: 3).
	for i := 1; i < len(reads); i++ {
		if n := reads[i] - reads[i-1]; n > 4 {
			t.Errorf("scrape %d: %d read(2) calls for a %d KB body written 4 KB at a time, want at most 4 (plain transport: %d)", i+1, n, len(body)>>10, plainConn.reads.Load())
		}
	}
	if n := plainConn.reads.Load(); n < 20 {
		t.Errorf("the plain transport read the trickle in %d calls: the test no longer shows a trickle", n)
	}
}

// A response smaller than the last by more than the slack never reaches
// the low-water mark on a kept connection: it is read after the wait for
// the mark, well within the scrape's timeout, and the next one is read
// in few calls again with the new size.
func TestScrapeReadsASmallerBodyAfterTheWait(t *testing.T) {
	big, small := bigMetrics(180<<10), bigMetrics(60<<10)
	var n atomic.Int64
	srv := trickle(func() string {
		if n.Add(1) <= 2 {
			return big
		}
		return small
	})
	defer srv.Close()
	client, conns := countingClient()
	client.Timeout = 5 * maxMarkWait // the mark's wait must end the read, not this
	for range 4 {
		scrapeWith(t, client, srv.URL)
	}
	if len(*conns) != 1 {
		t.Errorf("%d connections, want one kept", len(*conns))
	}
	before := (*conns)[0].reads.Load()
	scrapeWith(t, client, srv.URL)
	if d := (*conns)[0].reads.Load() - before; d > 4 {
		t.Errorf("%d read(2) calls for the smaller body once its size was learned, want at most 4", d)
	}
}

// The low-water mark follows the last response: a little below its size,
// at most the transport's buffer, none for a small body; the wait for it
// is twice the last response's time, within bounds.
func TestMarkFor(t *testing.T) {
	for _, c := range []struct {
		size int
		took time.Duration
		mark int
		wait time.Duration
	}{
		{0, 0, 0, 0},
		{2*scrapeSlack - 1, time.Second, 0, 0},
		{180 << 10, 30 * time.Millisecond, 180<<10 - scrapeSlack, minMarkWait},
		{180 << 10, 300 * time.Millisecond, 180<<10 - scrapeSlack, 600 * time.Millisecond},
		{180 << 10, 3 * time.Second, 180<<10 - scrapeSlack, maxMarkWait},
		{4 << 20, 0, scrapeReadBuffer, minMarkWait},
	} {
		mark, wait := markFor(c.size, c.took)
		if mark != c.mark || wait != c.wait {
			t.Errorf("markFor(%d, %s) = %d, %s; want %d, %s", c.size, c.took, mark, wait, c.mark, c.wait)
		}
	}
}

package guard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// scrapeReadBuffer is the transport's read buffer. At the default 4 KB,
// a scrape of etcd's ~180 KB chunked body took one read(2) per 4 KB
// chunk; in the TCG guest the scrape's reads were 18 % of stage-once's
// CPU (profiled, floor-300MiB-2). A buffer that holds the whole body
// takes whatever the socket has in one call.
const scrapeReadBuffer = 256 << 10

// scrapeSlack is how far below the last response's size the next one's
// low-water mark is. etcd's /metrics keeps its size within a few hundred
// bytes between scrapes (the digits of its counters and gauges); the
// tail above the mark, etcd's last 4 KB write, is read as it comes: a
// wake-up at the mark and one for the tail. A body that shrank by more
// (a member removed, etcd restarted) waits for the mark's wait once.
const scrapeSlack = 4 << 10

// The wait for the mark before the body is read as it comes: twice the
// last response's time, within these bounds. A body smaller than the
// last by more than scrapeSlack (etcd restarted) meets the mark never and
// is read after this wait, well within the scrape's 2 s timeout.
const (
	minMarkWait = 100 * time.Millisecond
	maxMarkWait = time.Second
)

// newScrapeClient is the metrics client. It keeps its connection to etcd
// (a connection per scrape was 12 % of stage-once's CPU in the TCG
// guest, cpu-300MiB-2) and wakes its reader twice a response (near its
// end, and for the tail) instead of once for each 4 KB chunk etcd writes
// as it renders (each wake-up a pass of Go's scheduler and netpoller):
// the socket's low-water mark (SO_RCVLOWAT) is set, for each response, a
// little below the size of the last one. etcd sends /metrics chunked,
// without a Content-Length; the client's first response, with no size to
// go by, is read as it comes. wrap, when non-nil, wraps each connection
// (tests count its reads).
func newScrapeClient(wrap func(net.Conn) net.Conn) *http.Client {
	sizes := &scrapeSizes{}
	d := &net.Dialer{Timeout: 2 * time.Second}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ReadBufferSize = scrapeReadBuffer
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			return c, nil
		}
		raw, err := tc.SyscallConn()
		if err != nil {
			return c, nil
		}
		if wrap != nil {
			c = wrap(c)
		}
		return &lowWaterConn{Conn: c, raw: raw, sizes: sizes}, nil
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: t}
}

// scrapeSizes is what a client learned of the last response.
type scrapeSizes struct {
	mu   sync.Mutex
	size int           // bytes on the wire (0: none yet)
	took time.Duration // from the request to the last byte
}

func (s *scrapeSizes) learn(size int, took time.Duration) {
	s.mu.Lock()
	s.size, s.took = size, took
	s.mu.Unlock()
}

// mark is the low-water mark for the next response (0: none, read each
// chunk as it comes) and how long to wait for it.
func (s *scrapeSizes) mark() (int, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return markFor(s.size, s.took)
}

// markFor is the low-water mark for a response like the last one (size
// bytes, took long) and how long to wait for it. A mark past the
// transport's buffer would not be read in one call anyway; a body under
// twice the slack is not worth one.
func markFor(size int, took time.Duration) (int, time.Duration) {
	if size < 2*scrapeSlack {
		return 0, 0
	}
	return min(size-scrapeSlack, scrapeReadBuffer), min(max(2*took, minMarkWait), maxMarkWait)
}

// lowWaterConn sets the socket's low-water mark when a request is
// written and lowers it to a byte once the mark is reached, or once the
// wait for it has passed: a guess too high never holds a read longer.
// http.Transport reads a connection from one goroutine and writes it
// from another, and sets no deadlines of its own.
type lowWaterConn struct {
	net.Conn
	raw   syscall.RawConn
	sizes *scrapeSizes

	mu    sync.Mutex
	got   int       // bytes read since the last request
	sent  time.Time // when it was written
	last  time.Time // when its last bytes were read
	armed bool      // the mark and the read deadline are set
}

func (c *lowWaterConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	now := time.Now()
	if c.got > 0 {
		// The transport writes a request once the last response was read
		// whole: its size is known.
		c.sizes.learn(c.got, c.last.Sub(c.sent))
		c.got = 0
	}
	c.sent = now
	if mark, wait := c.sizes.mark(); mark > 0 && !c.armed && c.setLowWater(mark) == nil {
		c.armed = true
		_ = c.Conn.SetReadDeadline(now.Add(wait))
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *lowWaterConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		c.mu.Lock()
		if n > 0 {
			c.got += n
			c.last = time.Now()
		}
		late := c.armed && n == 0 && errors.Is(err, os.ErrDeadlineExceeded)
		if c.armed && (n > 0 || late) {
			c.armed = false
			_ = c.setLowWater(1)
			_ = c.Conn.SetReadDeadline(time.Time{})
		}
		c.mu.Unlock()
		if !late {
			return n, err
		}
		// The mark was not reached in time: read what is there.
	}
}

func (c *lowWaterConn) setLowWater(n int) error {
	var serr error
	if err := c.raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n)
	}); err != nil {
		return err
	}
	return serr
}

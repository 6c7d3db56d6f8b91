package guard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/jonboulle/clockwork"
)

// Source reads the guard's inputs.
type Source interface {
	Read(ctx context.Context) (Reading, error)
}

// Inputs reads etcd's /metrics, the disks' stat files and a PSI file. No
// synthetic fsync probe: measured here, a 40/s fdatasync probe beside an
// etcd-like load halved its throughput and doubled its p99 by itself.
type Inputs struct {
	// MetricsURL is the local etcd member's metrics endpoint
	// (http://127.0.0.1:2381/metrics); "" uses kernel signals alone.
	MetricsURL string
	// MetricsEvery spaces the metrics scrapes (0: every read). etcd
	// renders its whole /metrics (~180 KB) for each one: at a fast
	// interval that costs the member CPU, and the histograms change
	// little within a second. The cheap inputs are read every time.
	MetricsEvery time.Duration
	HTTP         *http.Client
	// TLS is for an https:// MetricsURL (MetricsTLS); nil uses Go's
	// defaults (system roots, no client certificate).
	TLS *tls.Config
	// SysRoot is where sysfs is mounted ("/sys"); Disks are kernel names.
	SysRoot string
	Disks   []string
	// PressureFile is /proc/pressure/io or etcd's cgroup io.pressure; ""
	// skips PSI.
	PressureFile string
	// CPUPressureFile is etcd's cgroup cpu.pressure; "" skips it.
	CPUPressureFile string
	// FindPressureFiles, when set, finds both files again after a read
	// of PressureFile fails, at most every RefindEvery: a member the
	// kubelet runs gets a cgroup of a new name when its container
	// restarts (a unit's keeps its path, which KernelFile reopens).
	FindPressureFiles func() (psi, cpu string, err error)
	Clock             clockwork.Clock

	lastFind time.Time

	lastScrape time.Time
	lastHists  map[string]Histogram
	// Kept between reads: each was an allocation every read, the files
	// an open(2) each.
	client    *http.Client
	body      []byte
	statFiles []*KernelFile
	psiFile   *KernelFile
	cpuFile   *KernelFile
	// pread, when set, is the files' (tests inject the kernel's failures).
	pread func(fd int, p []byte, off int64) (int, error)
}

// Close closes the kept files and the kept connection to etcd.
func (in *Inputs) Close() error {
	var errs []error
	for _, f := range in.statFiles {
		errs = append(errs, f.Close())
	}
	in.statFiles = nil
	for _, f := range []**KernelFile{&in.psiFile, &in.cpuFile} {
		if *f != nil {
			errs = append(errs, (*f).Close())
			*f = nil
		}
	}
	if in.client != nil {
		in.client.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// Read takes one reading. It returns what it could read together with the
// errors of what it could not, so one failing input does not blind the
// guard to the others.
func (in *Inputs) Read(ctx context.Context) (Reading, error) {
	clk := in.Clock
	if clk == nil {
		clk = clockwork.NewRealClock()
	}
	r := Reading{At: clk.Now()}
	var errs []error
	switch {
	case in.MetricsURL == "":
	case in.lastHists != nil && r.At.Sub(in.lastScrape) < in.MetricsEvery-in.MetricsEvery/10:
		// A tenth early is due: the reads fall on a grid (NextTick), each
		// a little late, and a scrape missed by a hair waited a whole tick.
		r.Hists = in.lastHists
	default:
		h, err := in.fetch(ctx)
		if err != nil {
			errs = append(errs, err)
			// etcd did not answer in time, while the reader could wait: a
			// sign of its own (a member too starved to serve /metrics in
			// 2 s serves its peers no better). A read cut short by the
			// caller (a freeze ending) says nothing about etcd.
			var te interface{ Timeout() bool }
			r.MetricsTimeout = ctx.Err() == nil && errors.As(err, &te) && te.Timeout()
		}
		r.Hists = h
		in.lastScrape, in.lastHists = r.At, h
	}
	if len(in.Disks) > 0 {
		r.Disks = make(map[string]DiskStat, len(in.Disks))
		if len(in.statFiles) != len(in.Disks) {
			root := in.SysRoot
			if root == "" {
				root = "/sys"
			}
			for _, f := range in.statFiles {
				f.Close()
			}
			in.statFiles = make([]*KernelFile, len(in.Disks))
			for i, d := range in.Disks {
				in.statFiles[i] = &KernelFile{Path: filepath.Join(root, "block", d, "stat"), Pread: in.pread}
			}
		}
		for i, d := range in.Disks {
			f := in.statFiles[i]
			b, err := f.Read()
			if err == nil {
				var ds DiskStat
				if ds, err = ParseDiskStat(string(b)); err == nil {
					r.Disks[d] = ds
					continue
				}
				err = fmt.Errorf("reading %s: %w", f.Path, err)
			}
			errs = append(errs, err)
		}
	}
	var err error
	r.Pressure, err = in.pressure(&in.psiFile, in.PressureFile)
	if err != nil && in.refind(r.At) {
		r.Pressure, err = in.pressure(&in.psiFile, in.PressureFile)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if r.CPUPressure, err = in.pressure(&in.cpuFile, in.CPUPressureFile); err != nil {
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// RefindEvery spaces FindPressureFiles's calls while the files stay gone
// (a /proc scan each).
const RefindEvery = 10 * time.Second

// refind asks FindPressureFiles for the files again, when due; true when
// they moved.
func (in *Inputs) refind(now time.Time) bool {
	if in.FindPressureFiles == nil || !in.lastFind.IsZero() && now.Sub(in.lastFind) < RefindEvery {
		return false
	}
	in.lastFind = now
	psi, cpu, err := in.FindPressureFiles()
	if err != nil || psi == in.PressureFile {
		return false
	}
	in.PressureFile, in.CPUPressureFile = psi, cpu
	return true
}

// pressure reads the PSI file at path through the kept *f (nil, nil when
// path is "").
func (in *Inputs) pressure(f **KernelFile, path string) (*Pressure, error) {
	if path == "" {
		return nil, nil
	}
	if *f == nil || (*f).Path != path {
		if *f != nil {
			(*f).Close()
		}
		*f = &KernelFile{Path: path, Pread: in.pread}
	}
	b, err := (*f).Read()
	if err != nil {
		return nil, err
	}
	p, err := ParsePressure(string(b))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return &p, nil
}

// usedHists are the families the guard parses; every other is skipped.
var usedHists = []string{MetricWALFsync, MetricBackendCommit}

// MaxMetricsBody bounds the read of /metrics: etcd's is ~180 KB; a URL
// pointing elsewhere (or a broken server) must not fill the agent's memory.
const MaxMetricsBody = 8 << 20

// capReader reads at most left bytes, then fails: the parser stops there
// and over tells the cap from a parse error.
type capReader struct {
	r    io.Reader
	left int64
	over bool
}

var errCapped = errors.New("read limit reached")

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte past the cap tells "exactly at the cap" from "more".
		var b [1]byte
		n, err := c.r.Read(b[:])
		if n > 0 {
			c.over = true
			return 0, errCapped
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// readAll is io.ReadAll into buf, kept by the caller for the next body.
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	if cap(buf) == 0 {
		buf = make([]byte, 0, 64<<10)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

func (in *Inputs) fetch(ctx context.Context) (map[string]Histogram, error) {
	c := in.HTTP
	if c == nil {
		if in.client == nil {
			in.client = newScrapeClient(nil)
			if in.TLS != nil {
				in.client.Transport.(*http.Transport).TLSClientConfig = in.TLS
			}
		}
		c = in.client
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.MetricsURL, nil)
	if err != nil {
		return nil, fmt.Errorf("reading etcd metrics %s: %w", in.MetricsURL, err)
	}
	// Go's transport asks for gzip by default, and etcd (promhttp) then
	// deflates its ~180 KB for every scrape, which the agent inflates
	// again: CPU on both sides for a read over loopback. Measured
	// natively, the deflate was about a third of etcd's serving of
	// /metrics and the inflate half of the agent's scrape.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading etcd metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading etcd metrics %s: %s", in.MetricsURL, resp.Status)
	}
	body := &capReader{r: resp.Body, left: MaxMetricsBody}
	b, err := readAll(body, in.body[:0])
	in.body = b[:0]
	var h map[string]Histogram
	if err == nil {
		h, err = parseHistograms(b, usedHists)
	}
	if body.over {
		return nil, fmt.Errorf("reading etcd metrics %s: body larger than %d bytes, not etcd's /metrics", in.MetricsURL, MaxMetricsBody)
	}
	if err != nil {
		return nil, fmt.Errorf("reading etcd metrics %s: %w", in.MetricsURL, err)
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("reading etcd metrics %s: no %s histogram", in.MetricsURL, MetricWALFsync)
	}
	return h, nil
}

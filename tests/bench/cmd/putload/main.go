// Command putload drives a real etcd member the way a control plane does: a
// fixed rate of small puts (etcd fsyncs its WAL as fast as clients propose,
// not flat out), and records the member's own WAL fsync histogram
// (etcd_disk_wal_fsync_duration_seconds) every -scrape, so a benchmark gets
// both the distribution over a scenario and a timeline.
//
// Output (in -out): before.txt and after.txt (the histogram's exposition
// lines at start and end), timeline.csv
// ("unix_ms,count,p50_s,p99_s,max_bound_s" per scrape, from the deltas) and
// summary.json (Summary: the puts asked for, offered and served).
// It stops after -duration or on SIGTERM/SIGINT, writing everything.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/update-agent/update-agent/tests/bench/promhist"
)

const metric = "etcd_disk_wal_fsync_duration_seconds"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "putload:", err)
		os.Exit(1)
	}
}

func run() error {
	endpoint := flag.String("endpoint", "http://127.0.0.1:2379", "etcd client URL")
	metricsURL := flag.String("metrics", "http://127.0.0.1:2381/metrics", "etcd metrics URL")
	rate := flag.Int("rate", 50, "puts per second")
	size := flag.Int("size", 1024, "value bytes")
	keys := flag.Int("keys", 1000, "distinct keys written round robin")
	duration := flag.Duration("duration", time.Hour, "stop after this long")
	out := flag.String("out", "", "output directory")
	// etcd renders all its metrics (~180 KB) per scrape: under TCG that is
	// CPU taken from what is measured, so not every second by default.
	every := flag.Duration("scrape", 2*time.Second, "timeline resolution (one scrape of etcd's metrics each)")
	flag.Parse()
	if *out == "" || *rate < 1 {
		return errors.New("usage: putload -out DIR [-rate N] [-duration D]")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()

	before, beforeRaw, err := scrape(*metricsURL)
	if err != nil {
		return fmt.Errorf("first scrape: %w", err)
	}
	if err := os.WriteFile(filepath.Join(*out, "before.txt"), beforeRaw, 0o644); err != nil {
		return err
	}
	tl, err := os.Create(filepath.Join(*out, "timeline.csv"))
	if err != nil {
		return err
	}
	defer tl.Close()
	tw := bufio.NewWriter(tl)
	fmt.Fprintln(tw, "unix_ms,count,p50_s,p99_s,max_bound_s")

	start := time.Now()
	val := strings.Repeat("x", *size)
	interval := time.Second / time.Duration(*rate)
	next := time.Now()
	nextScrape := time.Now().Add(*every)
	prev := before
	var puts, late int
	var failed, dropped atomic.Int64
	inflight := make(chan struct{}, 256)
	var wg sync.WaitGroup
	var lastRaw []byte
	for ctx.Err() == nil {
		// Open loop: a slow put does not lower the offered rate, as with
		// real clients; fall-behind is counted, not caught up in a burst.
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		} else if -d > interval {
			late++
			next = time.Now()
		}
		next = next.Add(interval)
		// Each put in its own goroutine: a stalled WAL delays the answers,
		// not the offered load (open loop, like many clients).
		select {
		case inflight <- struct{}{}:
			wg.Add(1)
			go func(key string) {
				defer wg.Done()
				defer func() { <-inflight }()
				pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer pcancel()
				if _, err := cli.Put(pctx, key, val); err != nil {
					failed.Add(1)
				}
			}(fmt.Sprintf("/bench/k%05d", puts%*keys))
		default:
			dropped.Add(1)
		}
		puts++
		if time.Now().After(nextScrape) {
			nextScrape = nextScrape.Add(*every)
			h, raw, err := scrape(*metricsURL)
			if err != nil {
				continue
			}
			lastRaw = raw
			if d, err := h.Sub(prev); err == nil {
				fmt.Fprintf(tw, "%d,%g,%s,%s,%s\n", time.Now().UnixMilli(), d.Total(),
					f(d.Quantile(0.5)), f(d.Quantile(0.99)), f(d.MaxBound()))
			}
			prev = h
		}
	}
	// The load ran until here: the wait for the last answers and the last
	// scrape below are not part of the rate.
	ran := time.Since(start)
	wg.Wait()
	if _, raw, err := scrape(*metricsURL); err == nil {
		lastRaw = raw
	}
	if lastRaw == nil {
		return errors.New("no scrape of etcd's metrics succeeded")
	}
	if err := os.WriteFile(filepath.Join(*out, "after.txt"), lastRaw, 0o644); err != nil {
		return err
	}
	// What was served, not etcd's WAL fsync count: etcd batches the puts
	// that arrive during a slow fsync into the next one, so fewer fsyncs
	// than puts says nothing about puts lost.
	sum := Summary{Asked: *rate, Offered: puts, Failed: failed.Load(), Dropped: dropped.Load(), Late: late,
		Seconds: ran.Seconds()}
	sum.Served = int64(puts) - sum.Failed - sum.Dropped
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "summary.json"), b, 0o644); err != nil {
		return err
	}
	fmt.Printf("puts=%d failed=%d dropped=%d late=%d\n", puts, failed.Load(), dropped.Load(), late)
	return tw.Flush()
}

// Summary is summary.json. Offered falls short of Asked x Seconds when the
// generator itself fell behind (Late: a starved guest); Served is Offered
// less the puts that failed or found 256 already in flight (Dropped).
type Summary struct {
	Asked   int     `json:"asked_per_s"`
	Offered int     `json:"offered"`
	Served  int64   `json:"served"`
	Failed  int64   `json:"failed"`
	Dropped int64   `json:"dropped"`
	Late    int     `json:"late"`
	Seconds float64 `json:"seconds"`
}

func f(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return fmt.Sprintf("%g", v)
}

// scrape returns the histogram and its exposition lines only (small files).
func scrape(url string) (promhist.Histogram, []byte, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return promhist.Histogram{}, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return promhist.Histogram{}, nil, err
	}
	var keep bytes.Buffer
	for _, line := range bytes.Split(b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(metric)) {
			keep.Write(line)
			keep.WriteByte('\n')
		}
	}
	h, err := promhist.Parse(bytes.NewReader(keep.Bytes()), metric)
	return h, keep.Bytes(), err
}

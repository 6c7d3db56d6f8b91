//go:build bench

package coord

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// quick is BENCH_QUICK=1: fewer rollouts and a shorter bound, for iteration.
var quick = os.Getenv("BENCH_QUICK") == "1"

// smoke is BENCH_SMOKE=1 (make bench-smoke, part of make check): each
// benchmark at a size that runs in seconds, so one that breaks fails CI.
// Explicit BENCH_* sizes still apply.
var smoke = os.Getenv("BENCH_SMOKE") == "1"

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// writeResult writes name under $BENCH_OUT (when set) and logs it.
func writeResult(t *testing.T, name, content string) {
	t.Helper()
	fmt.Print(content)
	dir := os.Getenv("BENCH_OUT")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLockAtScale: BENCH_LOCK_SESSIONS sessions (default 1000) on one etcd
// contend for a group with 3 slots; each holder keeps its slot briefly and
// releases. Bounded by BENCH_LOCK_SECONDS (default 240): hand-offs done by
// then are reported. Fails on a safety violation (more than 3 holders, or a
// grant out of FIFO order).
func TestLockAtScale(t *testing.T) {
	const slots = 3
	defSessions, boundS := 1000, 240
	if quick {
		boundS = 60
	}
	if smoke {
		defSessions, boundS = 50, 60
	}
	sessions := envInt("BENCH_LOCK_SESSIONS", defSessions)
	bound := time.Duration(envInt("BENCH_LOCK_SECONDS", boundS)) * time.Second
	hold := 20 * time.Millisecond

	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	var clis []*clientv3.Client
	for i := 0; i < 8; i++ {
		clis = append(clis, c.Client(t, nil))
	}
	watchCli := c.Client(t, nil)
	const prefix, group = "/bench", "g"
	holders := prefix + "/" + group + "/holders/"

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()

	// The auditor sees every change of the queue in revision order.
	var (
		evMu   sync.Mutex
		events []QueueEvent
	)
	start, err := watchCli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wch := watchCli.Watch(wctx, holders, clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision+1))
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for wr := range wch {
			evMu.Lock()
			for _, e := range wr.Events {
				events = append(events, QueueEvent{
					Key: string(e.Kv.Key), Delete: e.Type == clientv3.EventTypeDelete,
					CreateRevision: e.Kv.CreateRevision, ModRevision: e.Kv.ModRevision, Value: e.Kv.Value,
				})
			}
			evMu.Unlock()
		}
	}()

	var (
		cur, maxCur, queued atomic.Int64
		mu                  sync.Mutex
		grants, releases    []time.Time
		allQueued           time.Time
		failures            atomic.Int64
		errMu               sync.Mutex
		firstErr            error
	)
	fail := func(err error) {
		failures.Add(1)
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	quiet := slog.New(slog.DiscardHandler)
	stateBase := t.TempDir()
	var wg sync.WaitGroup
	began := time.Now()
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			node := fmt.Sprintf("n%04d", i)
			// Each session is a host with its own state directory, which
			// the agent's state store creates before the lock writes to it.
			dir := filepath.Join(stateBase, node)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Error(err)
				return
			}
			l, err := lock.New(clis[i%len(clis)], lock.Options{
				Prefix: prefix, Group: group, Slots: slots, TTL: 60 * time.Second,
				Node: node, StateDir: dir, Log: quiet,
			})
			if err != nil {
				t.Error(err)
				return
			}
			defer l.Close()
			once := false
			_, err = l.Acquire(ctx, "target", func(lock.Position) {
				if !once {
					once = true
					if queued.Add(1) == int64(sessions) {
						mu.Lock()
						allQueued = time.Now()
						mu.Unlock()
					}
				}
			})
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("%s acquiring: %w", node, err))
				}
				return
			}
			n := cur.Add(1)
			for m := maxCur.Load(); n > m && !maxCur.CompareAndSwap(m, n); m = maxCur.Load() {
			}
			mu.Lock()
			grants = append(grants, time.Now())
			mu.Unlock()
			time.Sleep(hold)
			cur.Add(-1)
			mu.Lock()
			releases = append(releases, time.Now())
			mu.Unlock()
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer rcancel()
			if err := l.Release(rctx); err != nil {
				fail(fmt.Errorf("%s releasing: %w", node, err))
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(began)
	time.Sleep(200 * time.Millisecond) // let the auditor's watch catch up
	wcancel()
	<-watchDone

	evMu.Lock()
	audit := AuditQueue(events, slots)
	evMu.Unlock()
	mu.Lock()
	ho := HandOffs(releases, grants, slots, allQueued)
	nGrants := len(grants)
	mu.Unlock()

	res := fmt.Sprintf(`## Lock at fleet scale

%d sessions on one etcd member, one group with %d slots, each holder keeps its slot %v.
Bounded at %v: %d of %d sessions got their slot in %.1f s (all queued: %v).

| measure | value |
|---|---|
| sessions queued (auditor) | %d |
| grants (clients / auditor) | %d / %d |
| max concurrent holders (clients / auditor) | %d / %d |
| FIFO violations (grants out of order, auditor) | %d |
| hand-offs measured | %d |
| hand-off latency p50 | %.1f ms |
| hand-off latency p99 | %.1f ms |
| hand-off latency max | %.1f ms |
| errors (other than the time bound) | %d |

`, sessions, slots, hold, bound, nGrants, sessions, elapsed.Seconds(), !allQueued.IsZero(),
		audit.Enqueued, nGrants, audit.Grants, maxCur.Load(), audit.MaxHolders, audit.Unentitled,
		len(ho), ms(Quantile(ho, 0.5)), ms(Quantile(ho, 0.99)), ms(Quantile(ho, 1)), failures.Load())
	writeResult(t, "lock-scale.md", res)

	if maxCur.Load() > slots || audit.MaxHolders > slots {
		t.Errorf("more than %d holders at once: clients %d, auditor %d", slots, maxCur.Load(), audit.MaxHolders)
	}
	if audit.Unentitled > 0 {
		t.Errorf("%d grants out of FIFO order", audit.Unentitled)
	}
	// A grant can land in etcd just as the time bound cancels its client.
	if audit.Grants != nGrants && (nGrants == sessions || audit.Grants > nGrants+slots) {
		t.Errorf("clients saw %d grants, etcd recorded %d", nGrants, audit.Grants)
	}
	if f := failures.Load(); f > 0 {
		t.Errorf("%d sessions failed, first: %v", f, firstErr)
	}
	// Slowness is a finding reported above; no hand-off at all is no result.
	if len(ho) == 0 {
		t.Errorf("only %d grants within %v: no hand-off measured", nGrants, bound)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

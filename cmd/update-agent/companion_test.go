package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
)

// fakeTransactions is rpm-ostree status with the transaction the test sets.
type fakeTransactions struct {
	mu     sync.Mutex
	active *rpmostree.Transaction
	reads  int
}

func (f *fakeTransactions) set(t *rpmostree.Transaction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active = t
}

func (f *fakeTransactions) Status(context.Context) (*rpmostree.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return &rpmostree.Status{Transaction: f.active}, nil
}

// fakePacer records the windows; each lasts until ended or ctx, and its
// undo takes a moment.
type fakePacer struct {
	mu    sync.Mutex
	calls []stage.Foreign
	open  int // windows open now
	ends  []string
	err   error // returned at once, without opening
}

func (f *fakePacer) PaceForeign(ctx context.Context, t stage.Foreign, ended <-chan struct{}) (stage.Report, error) {
	f.mu.Lock()
	f.calls = append(f.calls, t)
	err := f.err
	if err == nil {
		f.open++
	}
	f.mu.Unlock()
	if err != nil {
		return stage.Report{}, err
	}
	why := "ended"
	select {
	case <-ended:
	case <-ctx.Done():
		why = "ctx"
	}
	time.Sleep(20 * time.Millisecond) // the undo
	f.mu.Lock()
	f.open--
	f.ends = append(f.ends, why)
	f.mu.Unlock()
	return stage.Report{}, nil
}

func (f *fakePacer) state() (calls, open int, ends []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls), f.open, append([]string(nil), f.ends...)
}

func startCompanion(t *testing.T, st *fakeTransactions, p *fakePacer) (stop func()) {
	t.Helper()
	return startCompanionLog(t, st, p, io.Discard)
}

func startCompanionLog(t *testing.T, st *fakeTransactions, p *fakePacer, log io.Writer) (stop func()) {
	t.Helper()
	c := &companion{status: st, pacer: p, every: 5 * time.Millisecond, log: slog.New(slog.NewTextHandler(log, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	return func() { cancel(); <-done }
}

var zincatiDeploy = &rpmostree.Transaction{Method: "Deploy", Sender: ":1.42", Path: "/org/projectatomic/rpmostree1/fedora"}

// Companion mode opens the window when a deployment-writing transaction
// appears (zincati's deploy), keeps it while the transaction runs, and
// closes it once the transaction is gone; a finalization is not paced.
func TestCompanionPacesAForeignTransactionFromStartToEnd(t *testing.T) {
	st, p := &fakeTransactions{}, &fakePacer{}
	stop := startCompanion(t, st, p)
	defer stop()

	st.set(&rpmostree.Transaction{Method: "FinalizeDeployment", Sender: ":1.42"})
	waitFor(t, "looks at a finalization", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.reads > 3 })
	if calls, _, _ := p.state(); calls != 0 {
		t.Fatalf("a finalization was paced (%d windows)", calls)
	}
	st.set(zincatiDeploy)
	waitFor(t, "the window to open", func() bool { _, open, _ := p.state(); return open == 1 })
	time.Sleep(30 * time.Millisecond) // several looks
	if calls, open, ends := p.state(); calls != 1 || open != 1 || len(ends) != 0 {
		t.Fatalf("while the transaction runs: %d windows, %d open, ended %v", calls, open, ends)
	}
	p.mu.Lock()
	got := p.calls[0]
	p.mu.Unlock()
	if got != (stage.Foreign{Method: "Deploy", Sender: ":1.42", Path: zincatiDeploy.Path}) {
		t.Errorf("window for %+v", got)
	}
	st.set(nil)
	waitFor(t, "the window to close", func() bool { _, open, _ := p.state(); return open == 0 })
	if _, _, ends := p.state(); len(ends) != 1 || ends[0] != "ended" {
		t.Errorf("window ends %v, want one ended by the transaction's end", ends)
	}
}

// Stopping the agent mid-transaction undoes the window before run returns
// (the transaction goes on).
func TestCompanionStopUndoesTheWindowFirst(t *testing.T) {
	st, p := &fakeTransactions{}, &fakePacer{}
	st.set(zincatiDeploy)
	stop := startCompanion(t, st, p)
	waitFor(t, "the window to open", func() bool { _, open, _ := p.state(); return open == 1 })
	stop()
	if _, open, ends := p.state(); open != 0 || len(ends) != 1 {
		t.Errorf("after run returned: %d windows open, ends %v", open, ends)
	}
}

// A window that fails to open is not retried every poll for the same
// transaction; one refused because the host's own staging runs is.
func TestCompanionFailedWindowNotRetriedForTheSameTransaction(t *testing.T) {
	st, p := &fakeTransactions{}, &fakePacer{err: errors.New("setup failed")}
	st.set(zincatiDeploy)
	stop := startCompanion(t, st, p)
	waitFor(t, "many looks", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.reads > 10 })
	stop()
	if calls, _, _ := p.state(); calls != 1 {
		t.Errorf("%d attempts for one transaction, want 1", calls)
	}

	st, p = &fakeTransactions{}, &fakePacer{err: stage.ErrBusy}
	st.set(zincatiDeploy)
	stop = startCompanion(t, st, p)
	waitFor(t, "retries while the host stages", func() bool { calls, _, _ := p.state(); return calls > 2 })
	stop()
}

// staging.pace_foreign with updates off wires the companion; otherwise
// there is none.
func TestWireCompanion(t *testing.T) {
	for _, c := range []struct {
		pace, updates, want bool
	}{{true, false, true}, {false, false, false}, {false, true, false}} {
		cfg := config.Default()
		cfg.Agent.NodeName = "n1"
		cfg.Staging.PaceForeign, cfg.Updates.Enabled = c.pace, c.updates
		root := t.TempDir()
		a, err := wire(cfg, root, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if (a.companion != nil) != c.want {
			t.Errorf("pace_foreign %v, updates %v: companion %v", c.pace, c.updates, a.companion != nil)
		}
		if a.companion != nil {
			want := filepath.Join(root, "sys/fs/cgroup")
			if tr, ok := a.companion.trigger.(*cgroupTrigger); !ok || tr.root != want || tr.unit != "rpm-ostreed.service" {
				t.Errorf("companion's trigger %#v, want rpm-ostreed.service's cgroup under --root (%s)", a.companion.trigger, want)
			}
		}
		a.close()
	}
}

// The first status look is said once ("armed"): the latency bench starts
// its transaction after it.
func TestCompanionSaysArmedOnceAfterItsFirstLook(t *testing.T) {
	st, p := &fakeTransactions{}, &fakePacer{}
	var logs syncBuffer
	stop := startCompanionLog(t, st, p, &logs)
	waitFor(t, "several looks", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.reads > 3 })
	stop()
	if n := strings.Count(logs.String(), "companion mode: armed"); n != 1 {
		t.Errorf("armed said %d times, want once:\n%s", n, logs.String())
	}
}

// syncBuffer is a log sink for the companion's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

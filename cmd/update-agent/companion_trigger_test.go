package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"
)

func TestTriggerWriting(t *testing.T) {
	const m = 1 << 20
	absent := triggerSample{}
	at := func(n uint64) triggerSample { return triggerSample{Present: true, Pending: n} }
	for _, c := range []struct {
		name      string
		prev, cur triggerSample
		want      bool
	}{
		{"rpm-ostreed not running", absent, absent, false},
		{"started and writing at once", absent, at(8 * m), true},
		{"dirty page cache rising", at(3 * m), at(9 * m), true},
		{"rising from nothing past the bar", at(0), at(triggerBytes), true},
		{"small writes under the bar", at(0), at(triggerBytes - 1), false},
		{"old writes waiting for writeback", at(9 * m), at(9 * m), false},
		{"being written back", at(9 * m), at(5 * m), false},
		{"exited", at(9 * m), absent, false},
	} {
		if got := triggerWriting(c.prev, c.cur); got != c.want {
			t.Errorf("%s: triggerWriting(%+v, %+v) = %v, want %v", c.name, c.prev, c.cur, got, c.want)
		}
	}
}

// The reader over a cgroup directory: absent is idle, memory.stat's dirty
// and writeback lines are summed, and a cgroup without memory.stat (the
// memory controller off) is an error, not an idle daemon.
func TestCgroupTrigger(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "system.slice", "rpm-ostreed.service")
	tr := newCgroupTrigger(dir)
	defer tr.Close()
	if s, err := tr.Sample(); err != nil || s.Present {
		t.Fatalf("no cgroup: %+v, %v; want absent", s, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Sample(); err == nil {
		t.Error("a cgroup without memory.stat read as a sample")
	}
	// The lines of the kernel's Documentation/admin-guide/cgroup-v2.rst,
	// memory.stat (file_dirty, file_writeback among the others).
	stat := "anon 4096\nfile 20000\nfile_mapped 100\nfile_dirty 3000\nfile_writeback 500\nshmem 0\n"
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := tr.Sample(); err != nil || s != (triggerSample{Present: true, Pending: 3500}) {
		t.Errorf("sample %+v, %v; want present, 3500 pending", s, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte("anon 1\nfile_dirty 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr.Close() // a regular file rewritten is read again only once reopened
	if _, err := tr.Sample(); err == nil {
		t.Error("memory.stat without file_writeback read as a sample")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if s, err := tr.Sample(); err != nil || s.Present {
		t.Errorf("cgroup removed: %+v, %v; want absent", s, err)
	}
}

// fakeTrigger is rpm-ostreed's cgroup: writing, its dirty page cache
// rises by a MiB each read.
type fakeTrigger struct {
	mu      sync.Mutex
	writing bool
	pending uint64
	reads   int
}

func (f *fakeTrigger) Sample() (triggerSample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.writing {
		f.pending += 1 << 20
	}
	return triggerSample{Present: true, Pending: f.pending}, nil
}

func (f *fakeTrigger) String() string { return "fake" }

func (f *fakeTrigger) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.reads }

// The window opens when rpm-ostreed starts writing, well before the next
// 5 s poll; while it writes and status shows no transaction, the trigger
// looks at most once a second.
func TestCompanionTriggerOpensTheWindowBeforeThePoll(t *testing.T) {
	st, p, tr := &fakeTransactions{}, &fakePacer{}, &fakeTrigger{}
	clk := clockwork.NewFakeClock()
	c := &companion{status: st, pacer: p, every: companionPoll, trigger: tr, clock: clk,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	defer func() { cancel(); <-done }()
	reads := func() int { st.mu.Lock(); defer st.mu.Unlock(); return st.reads }
	// step moves the fake clock one trigger period and waits for the read.
	step := func() {
		t.Helper()
		n := tr.count()
		clk.Advance(companionTriggerEvery)
		waitFor(t, "the trigger read", func() bool { return tr.count() > n })
	}

	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the first poll's timer
		t.Fatal(err)
	}
	clk.Advance(companionPoll)
	waitFor(t, "the first look", func() bool { return reads() == 1 })
	if err := clk.BlockUntilContext(ctx, 2); err != nil { // the poll and the trigger
		t.Fatal(err)
	}

	// rpm-ostreed writes with no transaction in status (the client's
	// own, say): one look a second at most.
	tr.mu.Lock()
	tr.writing = true
	tr.mu.Unlock()
	for range 8 { // 2 s
		step()
	}
	if n := reads(); n < 2 || n > 3 {
		t.Errorf("%d looks over 2 s of writes with no transaction, want 1 or 2 beside the first", n)
	}

	// The transaction starts: the window opens within a second.
	st.set(zincatiDeploy)
	for range 4 {
		step()
	}
	waitFor(t, "the window to open", func() bool { calls, _, _ := p.state(); return calls == 1 })
	if n := reads(); n > 4 {
		t.Errorf("%d looks in 3 s, want the poll's next look (at 5 s) not yet", n)
	}
	// With the window open the trigger starts no look.
	n := reads()
	for range 8 {
		step()
	}
	if got := reads(); got != n {
		t.Errorf("%d looks while the window is open and the poll not due, want none", got-n)
	}
}

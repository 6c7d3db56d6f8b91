package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

func TestTriggerRelocate(t *testing.T) {
	for _, c := range []struct {
		name           string
		asked, reading bool
		since          time.Duration
		want           bool
	}{
		{"first sample", false, false, 0, true},
		{"reading: the kept file, no ask", true, true, time.Hour, false},
		{"not readable, asked just now", true, false, time.Second, false},
		{"not readable for a relook", true, false, 5 * time.Second, true},
	} {
		if got := triggerRelocate(c.asked, c.reading, c.since, 5*time.Second); got != c.want {
			t.Errorf("%s: triggerRelocate(%v, %v, %v) = %v, want %v", c.name, c.asked, c.reading, c.since, got, c.want)
		}
	}
}

// fakeCgroups is systemd: the unit's cgroup, relative to the cgroup2 root.
type fakeCgroups struct {
	cg    string
	err   error
	asked int
}

func (f *fakeCgroups) UnitCgroup(_ context.Context, unit string) (string, error) {
	f.asked++
	return f.cg, f.err
}

// testTrigger is a trigger over a fake cgroup2 mount, its clock fake.
func testTrigger(t *testing.T, sys *fakeCgroups, logs io.Writer) (*cgroupTrigger, string, *clockwork.FakeClock) {
	root := t.TempDir()
	clk := clockwork.NewFakeClock()
	tr := newCgroupTrigger(root, "rpm-ostreed.service", sys, slog.New(slog.NewTextHandler(logs, nil)))
	tr.clock = clk
	t.Cleanup(tr.Close)
	return tr, root, clk
}

// writeStat makes dir a cgroup with memory.stat showing pending bytes
// dirty. The lines of the kernel's
// Documentation/admin-guide/cgroup-v2.rst, memory.stat (file_dirty,
// file_writeback among the others).
func writeStat(t *testing.T, dir string, pending int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("anon 4096\nfile 20000\nfile_mapped 100\nfile_dirty %d\nfile_writeback 500\nshmem 0\n", pending-500)
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The reader over a cgroup directory: absent is idle, memory.stat's dirty
// and writeback lines are summed, and a cgroup without memory.stat (the
// memory controller off) is an error, not an idle daemon.
func TestCgroupTrigger(t *testing.T) {
	sys := &fakeCgroups{cg: "/system.slice/rpm-ostreed.service"}
	tr, root, _ := testTrigger(t, sys, io.Discard)
	dir := filepath.Join(root, "system.slice", "rpm-ostreed.service")
	if s, err := tr.Sample(t.Context()); err != nil || s.Present {
		t.Fatalf("no cgroup: %+v, %v; want absent", s, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Sample(t.Context()); err == nil {
		t.Error("a cgroup without memory.stat read as a sample")
	}
	writeStat(t, dir, 3500)
	if s, err := tr.Sample(t.Context()); err != nil || s != (triggerSample{Present: true, Pending: 3500}) {
		t.Errorf("sample %+v, %v; want present, 3500 pending", s, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte("anon 1\nfile_dirty 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr.stat.Close() // a regular file rewritten is read again only once reopened
	if _, err := tr.Sample(t.Context()); err == nil {
		t.Error("memory.stat without file_writeback read as a sample")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	tr.stat.Close()
	if s, err := tr.Sample(t.Context()); err != nil || s.Present {
		t.Errorf("cgroup removed: %+v, %v; want absent", s, err)
	}
}

// The cgroup is systemd's, not a fixed path: a unit moved by a drop-in
// Slice= is watched where it runs, and said once.
func TestCgroupTriggerWatchesTheUnitsCgroup(t *testing.T) {
	sys := &fakeCgroups{cg: "/custom.slice/rpm-ostreed.service"}
	var logs syncBuffer
	tr, root, clk := testTrigger(t, sys, &logs)
	writeStat(t, filepath.Join(root, "system.slice", "rpm-ostreed.service"), 1<<20) // not this one
	dir := filepath.Join(root, "custom.slice", "rpm-ostreed.service")
	writeStat(t, dir, 3<<20)
	for range 3 {
		s, err := tr.Sample(t.Context())
		if err != nil || s != (triggerSample{Present: true, Pending: 3 << 20}) {
			t.Fatalf("sample %+v, %v; want custom.slice's 3 MiB", s, err)
		}
		clk.Advance(time.Minute)
	}
	if sys.asked != 1 {
		t.Errorf("systemd asked %d times while the cgroup reads, want once", sys.asked)
	}
	if want := filepath.Join(dir, "memory.stat"); tr.String() != want {
		t.Errorf("trigger file %s, want %s", tr, want)
	}
	if n := strings.Count(logs.String(), "companion trigger watching"); n != 1 || !strings.Contains(logs.String(), "cgroup="+dir) {
		t.Errorf("watching said %d times, want once with cgroup=%s:\n%s", n, dir, logs.String())
	}
}

// rpm-ostreed restarted into another cgroup (a Slice= drop-in and a
// daemon-reload while it was idle): once the old cgroup is gone the
// trigger asks systemd again, at most once a relook, and follows it.
func TestCgroupTriggerFollowsTheDaemonToANewCgroup(t *testing.T) {
	sys := &fakeCgroups{cg: "/system.slice/rpm-ostreed.service"}
	var logs syncBuffer
	tr, root, clk := testTrigger(t, sys, &logs)
	old := filepath.Join(root, "system.slice", "rpm-ostreed.service")
	writeStat(t, old, 1<<20)
	if s, err := tr.Sample(t.Context()); err != nil || s.Pending != 1<<20 {
		t.Fatalf("sample %+v, %v; want system.slice's 1 MiB", s, err)
	}
	// The daemon exits (its cgroup goes) and starts in custom.slice.
	if err := os.RemoveAll(old); err != nil {
		t.Fatal(err)
	}
	tr.stat.Close() // the kernel fails a removed cgroup's reads (ENODEV); a regular file still reads
	sys.cg = "/custom.slice/rpm-ostreed.service"
	writeStat(t, filepath.Join(root, "custom.slice", "rpm-ostreed.service"), 4<<20)
	clk.Advance(triggerRelook) // since the last ask
	if s, err := tr.Sample(t.Context()); err != nil || s.Present {
		t.Fatalf("old cgroup gone: %+v, %v; want absent (not asked again yet: it read)", s, err)
	}
	if s, err := tr.Sample(t.Context()); err != nil || s.Pending != 4<<20 {
		t.Fatalf("after the old cgroup went: %+v, %v; want custom.slice's 4 MiB", s, err)
	}
	if sys.asked != 2 {
		t.Errorf("systemd asked %d times, want twice", sys.asked)
	}
	if n := strings.Count(logs.String(), "companion trigger watching"); n != 2 {
		t.Errorf("watching said %d times, want once per cgroup:\n%s", n, logs.String())
	}
}

// systemd unreachable or without the unit: a warning naming it, once,
// the trigger idle, systemd asked again once a relook; found later, read.
func TestCgroupTriggerWithoutTheUnit(t *testing.T) {
	sys := &fakeCgroups{err: errors.New("unit not loaded")}
	var logs syncBuffer
	tr, root, clk := testTrigger(t, sys, &logs)
	writeStat(t, filepath.Join(root, "system.slice", "rpm-ostreed.service"), 8<<20)
	for range 10 {
		if s, err := tr.Sample(t.Context()); err != nil || s.Present {
			t.Fatalf("unit not found: %+v, %v; want absent", s, err)
		}
		clk.Advance(triggerRelook / 4)
	}
	if sys.asked < 2 || sys.asked > 3 {
		t.Errorf("systemd asked %d times over 2.5 relooks, want 2 or 3", sys.asked)
	}
	if n := strings.Count(logs.String(), "cannot find the unit's cgroup"); n != 1 || !strings.Contains(logs.String(), "unit=rpm-ostreed.service") {
		t.Errorf("warned %d times, want once naming the unit:\n%s", n, logs.String())
	}
	sys.err, sys.cg = nil, "/system.slice/rpm-ostreed.service"
	clk.Advance(triggerRelook)
	if s, err := tr.Sample(t.Context()); err != nil || s.Pending != 8<<20 {
		t.Errorf("found later: %+v, %v; want 8 MiB", s, err)
	}
}

// One read and parse of the kept-open memory.stat: what the idle agent
// pays four times a second.
func BenchmarkTriggerSample(b *testing.B) {
	root := b.TempDir()
	dir := filepath.Join(root, "system.slice", "rpm-ostreed.service")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	// A memory.stat of cgroup v2's full length (about 40 lines).
	var stat strings.Builder
	for i := range 20 {
		fmt.Fprintf(&stat, "key_%d %d\n", i, i*4096)
	}
	stat.WriteString("file_dirty 4096\nfile_writeback 0\n")
	for i := range 20 {
		fmt.Fprintf(&stat, "more_%d %d\n", i, i*4096)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(stat.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	tr := newCgroupTrigger(root, "rpm-ostreed.service", &fakeCgroups{cg: "/system.slice/rpm-ostreed.service"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer tr.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if s, err := tr.Sample(ctx); err != nil || !s.Present {
			b.Fatal(s, err)
		}
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

func (f *fakeTrigger) Sample(context.Context) (triggerSample, error) {
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

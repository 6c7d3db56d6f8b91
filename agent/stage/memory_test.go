package stage

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/guard/kernfstest"
	"github.com/update-agent/update-agent/agent/systemd"
)

func TestMemoryHighFor(t *testing.T) {
	const allowance = 32 * mib
	for _, c := range []struct {
		name      string
		m         cgroupMemory
		cur       uint64
		want      uint64
		wantReset bool
	}{
		{"small daemon: allowance plus its own memory, not worth a change", cgroupMemory{Current: 36 * mib, File: 30 * mib}, allowance, 38 * mib, false},
		{"layering daemon: raised with its own memory", cgroupMemory{Current: 400 * mib, File: 20 * mib}, allowance, 412 * mib, true},
		{"its memory freed again: lowered", cgroupMemory{Current: 30 * mib, File: 28 * mib}, 412 * mib, 34 * mib, true},
		{"under a quarter of the allowance off: left alone", cgroupMemory{Current: 47 * mib, File: 30 * mib}, 42 * mib, 49 * mib, false},
		{"a quarter off: set", cgroupMemory{Current: 48 * mib, File: 30 * mib}, 42 * mib, 50 * mib, true},
		{"rounded up to a MiB", cgroupMemory{Current: 10*mib + 1, File: 0}, 0, 43 * mib, true},
		{"file above current (racy reads): own is zero", cgroupMemory{Current: 10 * mib, File: 11 * mib}, 0, allowance, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, reset := memoryHighFor(c.m, allowance, c.cur)
			if got != c.want || reset != c.wantReset {
				t.Errorf("memoryHighFor(%+v, cur %d) = %d MiB, %v; want %d MiB, %v", c.m, c.cur, got/mib, reset, c.want/mib, c.wantReset)
			}
		})
	}
}

func TestParseCgroupMemory(t *testing.T) {
	stat := "anon 1000\nfile 2000\nkernel 300\nfile_dirty 5\n"
	m, err := parseCgroupMemory([]byte("4096\n"), []byte(stat))
	if err != nil || m != (cgroupMemory{Current: 4096, File: 2000}) {
		t.Errorf("got %+v, %v", m, err)
	}
	// In place: a bufio.Scanner was 2 allocations and 4 KB a unit every
	// second.
	cur, st := []byte("4096\n"), []byte(strings.Repeat("anon_thp 0\nshmem 0\n", 20)+stat)
	n := testing.AllocsPerRun(10, func() { parseCgroupMemory(cur, st) })
	t.Logf("%.0f allocations a parse", n)
	if n > 0 {
		t.Errorf("%.0f allocations a parse, want none", n)
	}
	for _, bad := range []struct{ cur, stat string }{
		{"max\n", stat},
		{"4096\n", "anon 1000\nfile_dirty 5\n"},
		{"4096\n", "file lots\n"},
	} {
		if _, err := parseCgroupMemory([]byte(bad.cur), []byte(bad.stat)); err == nil {
			t.Errorf("no error for %q / %q", bad.cur, bad.stat)
		}
	}
}

// writeCgroup fakes a unit's cgroup memory files under root.
func writeCgroup(t *testing.T, root, unit string, current, file uint64) {
	t.Helper()
	dir := filepath.Join(root, "fs/cgroup/system.slice", unit)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "memory.current"), []byte(fmt.Sprintf("%d\n", current)), 0o644)
	os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(fmt.Sprintf("anon %d\nfile %d\n", current-file, file)), 0o644)
}

// A daemon holding far more than the allowance (package metadata) gets its
// MemoryHigh raised while staging, and set back after; the staging unit,
// near its allowance, is left alone.
func TestRunMemoryHighFollowsOwnMemory(t *testing.T) {
	e := newEnv(t)
	e.opts.SysRoot = t.TempDir()
	writeCgroup(t, e.opts.SysRoot, "update-agent-staging.service", 10*mib, 8*mib)
	writeCgroup(t, e.opts.SysRoot, daemonUnit, 400*mib, 50*mib)
	s := e.stager(t, fakeDaemon{idle: true})
	var during uint64
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			e.sys.mu.Lock()
			during = e.sys.units[daemonUnit].props["MemoryHigh"].Uint
			e.sys.mu.Unlock()
			if during == 606*mib {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	if _, err := s.Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	if during != 606*mib {
		t.Errorf("daemon MemoryHigh while staging = %d MiB, want 606 (350 own + 256)", during/mib)
	}
	if n := e.sys.called("SetRuntime update-agent-staging.service"); n != 0 {
		t.Errorf("staging unit's MemoryHigh reset %d times; it was within a quarter of the allowance", n)
	}
	e.sys.mu.Lock()
	after := e.sys.units[daemonUnit].props["MemoryHigh"].Uint
	e.sys.mu.Unlock()
	if after != ^uint64(0) {
		t.Errorf("daemon MemoryHigh after staging = %d, want it set back (unset)", after)
	}
	e.assertUndone(t)
}

// The pacer asks systemd for a running unit's cgroup once, then reads the
// cgroup's files; once the unit stops (its cgroup gone) it asks again.
// D-Bus reads every second per unit cost the TCG guest's etcd CPU.
func TestMemoryPacerLooksUpARunningUnitOnce(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSystemd(t.TempDir())
	sys.unit("s.service").active = "active"
	writeCgroup(t, root, "s.service", 10*mib, 8*mib)
	p := &memoryPacer{sys: sys, sysRoot: root, units: []string{"s.service"}, staging: "s.service", allowance: 32 * mib, set: map[string]uint64{"s.service": 32 * mib},
		pread: kernfstest.Pread}
	defer p.close()
	for i := 0; i < 3; i++ {
		if err := p.step(context.Background(), "s.service"); err != nil {
			t.Fatal(err)
		}
	}
	if n := sys.lookups["s.service"]; n != 2 { // Brief + ControlGroup, once
		t.Errorf("%d systemd reads over 3 steps, want 2 (one lookup)", n)
	}
	os.RemoveAll(filepath.Join(root, "fs/cgroup/system.slice/s.service"))
	sys.unit("s.service").active = "inactive"
	for i := 0; i < 2; i++ {
		if err := p.step(context.Background(), "s.service"); err != nil {
			t.Fatalf("a stopped unit: %v", err)
		}
	}
	if n := sys.lookups["s.service"]; n != 3 { // the miss, then Brief says inactive
		t.Errorf("%d systemd reads after the unit stopped, want 3", n)
	}
}

// The pacer keeps a running unit's memory files open and reads them again
// each step (an open a file a second was most of its CPU in the TCG
// guest); when they fail as a removed cgroup's do, it opens the path again
// and follows the unit's new cgroup.
func TestMemoryPacerKeepsTheCgroupFilesOpen(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSystemd(t.TempDir())
	sys.unit("s.service").active = "active"
	writeCgroup(t, root, "s.service", 10*mib, 8*mib)
	dir := filepath.Join(root, "fs/cgroup/system.slice/s.service")
	p := &memoryPacer{sys: sys, sysRoot: root, units: []string{"s.service"}, staging: "s.service", allowance: 32 * mib, set: map[string]uint64{"s.service": 32 * mib},
		pread: kernfstest.Pread}
	defer p.close()
	high := func() uint64 {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "memory.high"))
		if os.IsNotExist(err) {
			return 0
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	step := func() {
		t.Helper()
		if err := p.step(context.Background(), "s.service"); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if h := high(); h != 0 {
		t.Fatalf("memory.high %d MiB for a unit within its allowance", h/mib)
	}
	// A new memory.current at the path (400 MiB), the open one kept under
	// another name: still read, so not opened again.
	cur := filepath.Join(dir, "memory.current")
	if err := os.Link(cur, cur+".kept"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cur+".new", []byte(fmt.Sprint(400*mib)), 0o644)
	if err := os.Rename(cur+".new", cur); err != nil {
		t.Fatal(err)
	}
	step()
	if h := high(); h != 0 {
		t.Fatalf("memory.high %d MiB: memory.current was opened again", h/mib)
	}
	// The open one gone (ENODEV): opened again, and the unit's 392 MiB of
	// its own memory followed.
	os.Remove(cur + ".kept")
	step()
	if h := high(); h != 424*mib {
		t.Errorf("memory.high %d MiB, want 424 (392 own + 32)", h/mib)
	}
	if n := sys.lookups["s.service"]; n != 2 {
		t.Errorf("%d systemd reads, want 2 (one lookup: the unit kept running)", n)
	}
}

// The pacer steps on the whole seconds of the clock, as the guard ticks
// (guard.NextTick), not a second after it started: the process then wakes
// once for both.
func TestMemoryPacerStepsOnTheGuardsGrid(t *testing.T) {
	sys := newFakeSystemd(t.TempDir())
	sys.unit("s.service") // not running: each step asks systemd once
	clk := clockwork.NewFakeClockAt(time.Date(2026, 12, 3, 12, 0, 0, 300_000_000, time.UTC))
	p := &memoryPacer{sys: sys, units: []string{"s.service"}, staging: "s.service", allowance: 32 * mib, interval: time.Second,
		set: map[string]uint64{"s.service": 32 * mib}, clock: clk}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.run(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); close(done) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	steps := func() int {
		sys.mu.Lock()
		defer sys.mu.Unlock()
		return sys.lookups["s.service"]
	}
	if err := clk.BlockUntilContext(wctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(700 * time.Millisecond) // to the whole second
	if err := clk.BlockUntilContext(wctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := steps(); n != 2 {
		t.Errorf("%d steps by the whole second after starting 300 ms past one, want 2", n)
	}
}

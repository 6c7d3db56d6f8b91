package stage

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/guard/kernfstest"
)

// Each reading adds what changed since the one before; a unit that
// stopped and started again (its counters new with its cgroup) counts
// both runs and not the gap, and counters that went down start a new span.
func TestStallMeterSumsTheRuns(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC)
	r := func(s int, used, cpu, io time.Duration) stallReading {
		return stallReading{at: t0.Add(time.Duration(s) * time.Second), used: used, cpuWait: cpu, ioWait: io}
	}
	var m stallMeter
	m.add(r(0, 1*time.Second, 1*time.Second, 1*time.Second))
	m.add(r(10, 3*time.Second, 4*time.Second, 8*time.Second)) // 10 s: 2 s CPU, 3 s and 7 s waits
	m.stopped()
	m.add(r(20, 0, 0, 0)) // a new cgroup: a first reading
	m.add(r(30, 1*time.Second, 1*time.Second, 1*time.Second))
	m.add(r(40, 500*time.Millisecond, 0, 0)) // went down: no span, counts from here
	m.add(r(50, 1500*time.Millisecond, 1*time.Second, 0))
	want := stallFigures{Span: 30 * time.Second, CPUUsed: 4 * time.Second, CPUWait: 5 * time.Second, IOWait: 8 * time.Second}
	if m.total != want {
		t.Errorf("got %+v, want %+v", m.total, want)
	}
	got := fmt.Sprint(m.total.LogAttrs()...)
	if want := fmt.Sprint("seconds", 30.0, "cpus_used", 0.133, "cpu_wait_share", 0.167, "io_wait_share", 0.267); got != want {
		t.Errorf("log attrs %s, want %s", got, want)
	}
}

// writeStall fakes a unit's cgroup CPU use and pressure totals (µs).
func writeStall(t *testing.T, dir string, used, cpuSome, ioSome int64) {
	t.Helper()
	for name, content := range map[string]string{
		"cpu.stat":     fmt.Sprintf("usage_usec %d\nuser_usec 0\nsystem_usec 0\n", used),
		"cpu.pressure": fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", cpuSome),
		"io.pressure":  fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", ioSome),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The memory pacer reads, on its round, what each unit it follows waited
// on, and says it at the window's end; a unit whose pressure files do not
// read (no PSI) is warned about once and not read again.
func TestMemoryPacerLogsWhatTheUnitWaitedOn(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSystemd(t.TempDir())
	sys.unit("s.service").active = "active"
	sys.unit("d.service").active = "active"
	writeCgroup(t, root, "s.service", 10*mib, 8*mib)
	writeCgroup(t, root, "d.service", 10*mib, 8*mib)
	dir := filepath.Join(root, "fs/cgroup/system.slice/s.service")
	writeStall(t, dir, 1_000_000, 2_000_000, 3_000_000)
	clk := clockwork.NewFakeClockAt(time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC))
	p := &memoryPacer{sys: sys, sysRoot: root, units: []string{"s.service", "d.service"}, staging: "s.service", allowance: 32 * mib,
		interval: time.Second, set: map[string]uint64{"s.service": 32 * mib, "d.service": 32 * mib}, clock: clk, pread: kernfstest.Pread}
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.run(ctx, slog.New(slog.NewTextHandler(&logs, nil))); close(done) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	for i := 1; i <= 4; i++ {
		if err := clk.BlockUntilContext(wctx, 1); err != nil {
			t.Fatal(err)
		}
		// Each second: half a CPU, a CPU wait 30 % and an I/O wait 60 %
		// of the time.
		writeStall(t, dir, 1_000_000+int64(i)*500_000, 2_000_000+int64(i)*300_000, 3_000_000+int64(i)*600_000)
		clk.Advance(time.Second)
	}
	if err := clk.BlockUntilContext(wctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	out := logs.String()
	for _, want := range []string{
		`msg="what the staging unit waited on over the window" systemd_unit=s.service seconds=4 cpus_used=0.5 cpu_wait_share=0.3 io_wait_share=0.6`,
		`msg="what the staging unit waits on is not measured" systemd_unit=d.service`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "is not measured"); n != 1 {
		t.Errorf("%d warnings for the unit without pressure files, want 1:\n%s", n, out)
	}
	if strings.Contains(out, "systemd_unit=d.service seconds") {
		t.Errorf("figures for a unit never measured:\n%s", out)
	}
}

package guard

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// io.stat as the 6.1 kernel printed it in the bench guest, iocost on vda
// (the root's line carries cost.vrate; a cgroup that did no I/O on a disk
// has no line for it).
const rootIOStat = `7:0 
254:16 rbytes=223228416 wbytes=1198323712 rios=4489 wios=2594 dbytes=0 dios=0
254:0 rbytes=989836288 wbytes=1119830016 rios=22815 wios=94752 dbytes=0 dios=0 cost.vrate=100.00 cost.usage=782142539
`

// cgroupPread fails on a file removed under its descriptor, as a removed
// cgroup's files do (a regular file would still read).
func cgroupPread(fd int, p []byte, off int64) (int, error) {
	if l, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil && strings.HasSuffix(l, " (deleted)") {
		return 0, syscall.ENODEV
	}
	return syscall.Pread(fd, p, off)
}

func TestParseCostUsage(t *testing.T) {
	got := ParseCostUsage(rootIOStat)
	if len(got) != 1 || got["254:0"] != 782142539 {
		t.Errorf("ParseCostUsage = %v, want 254:0 -> 782142539 alone", got)
	}
}

// The other tenants' share is the root's usage less the stager's over
// wall time; a stager cgroup appearing or gone in between makes it
// unknown, as does iocost off (no cost.usage).
func TestOthersShareFromTheKernelsBooks(t *testing.T) {
	dir := t.TempDir()
	root, stage, daemon := filepath.Join(dir, "io.stat"), filepath.Join(dir, "stage.io.stat"), filepath.Join(dir, "daemon.io.stat")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	line := func(usage int) string {
		return "254:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0 cost.usage=" + strconv.Itoa(usage) + "\n"
	}
	clk := clockwork.NewFakeClockAt(time.Unix(5000, 0))
	in := WithCost(&scriptSource{clk: clk, start: clk.Now(), latency: func(time.Duration) time.Duration { return time.Millisecond }},
		&CostInputs{Root: root, Own: []string{stage, daemon}, Devs: map[string]string{"254:0": "vda"}, Pread: cgroupPread})
	defer in.Close()
	read := func() Reading {
		t.Helper()
		r, err := in.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	write(root, "254:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n") // iocost off
	if r := read(); r.Cost != nil {
		t.Fatalf("iocost off: books %v, want none", r.Cost)
	}
	write(root, line(1_000_000))
	write(stage, line(400_000))
	r0 := read()
	clk.Advance(5 * time.Second)
	// 5 s: everything used 4 s of device time, the stager 1.5 s of it.
	write(root, line(5_000_000))
	write(stage, line(1_900_000))
	r1 := read()
	if got := Delta(r0, r1).Others; got != 0.5 {
		t.Errorf("others' share %g, want (4 - 1.5) s / 5 s = 0.5", got)
	}
	// The daemon's cgroup appears: it used nothing before.
	clk.Advance(5 * time.Second)
	write(daemon, line(500_000))
	write(root, line(7_500_000))
	r15 := read()
	if got := Delta(r1, r15).Others; got != 0.4 {
		t.Errorf("others' share %g, want (2.5 - 0.5) s / 5 s = 0.4", got)
	}
	r1 = r15
	clk.Advance(5 * time.Second)
	if err := os.Remove(stage); err != nil {
		t.Fatal(err)
	}
	write(root, line(8_000_000))
	r2 := read()
	if got := Delta(r1, r2).Others; got != -1 {
		t.Errorf("the stager's cgroup gone: share %g, want -1 (its usage left with it)", got)
	}
	if got := Delta(Reading{At: r0.At}, r1).Others; got != -1 {
		t.Errorf("no books before: share %g, want -1", got)
	}
}

package kstacks

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	const times = " 1 1234 1234 0 -1 4194560 10 0 0 0 25 17 0 0 20 0 11 0 100"
	for _, c := range []struct {
		stat string
		want byte
	}{
		{"1234 (etcd) S" + times, 'S'},
		{"1240 (etcd) D" + times, 'D'},
		// comm may hold spaces and parentheses: the state follows the last ')'.
		{"77 (a) D (b) R" + times, 'R'},
		{"78 ((sd-pam)) S" + times, 'S'},
		{"79 (x) y) D" + times, 'D'},
		{"80 (jbd2/vda3-8) D" + times + "\n", 'D'},
	} {
		got, ticks, err := ParseStat([]byte(c.stat))
		if err != nil || got != c.want || ticks != 42 {
			t.Errorf("ParseStat(%q) = %q, %d, %v; want %q, 42 ticks", c.stat, got, ticks, err, c.want)
		}
	}
	for _, bad := range []string{"", "1234 etcd S" + times, "1234 (etcd)", "1234 (etcd) \n", "1234 (etcd) S 1 2 3",
		"1234 (etcd) S 1 1234 1234 0 -1 4194560 10 0 0 0 x 17", "1234 (etcd) S 1 1234 1234 0 -1 4194560 10 0 0 0 25 -1",
		"1234 (etcd) SD" + times} {
		if st, _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) = %q, want an error", bad, st)
		}
	}
}

func TestParseIOCostStat(t *testing.T) {
	got, err := ParseIOCostStat([]byte("254:0 rbytes=1 wbytes=2 cost.vrate=151.20 cost.usage=9 cost.wait=1200 cost.indebt=30 cost.indelay=4\n" +
		"254:16 rbytes=0 cost.usage=0 cost.wait=800 cost.indebt=0 cost.indelay=1\n\n"))
	if err != nil || got == nil || *got != (IOCostCounters{WaitUS: 2000, DebtUS: 30, DelayUS: 5}) {
		t.Errorf("ParseIOCostStat = %+v, %v; want wait 2000, debt 30, delay 5 (summed over disks)", got, err)
	}
	// Without iocost, or with the debug stats off, there is nothing to sum.
	for _, none := range []string{"", "254:0 rbytes=1 wbytes=2 rios=1 wios=1 dbytes=0 dios=0\n", "254:0 cost.vrate=100.00\n"} {
		if got, err := ParseIOCostStat([]byte(none)); got != nil || err != nil {
			t.Errorf("%q: %+v, %v; want none", none, got, err)
		}
	}
	for _, bad := range []string{"254:0 cost.wait=x\n", "254:0 cost.wait=1 cost.indebt=-3\n"} {
		if got, err := ParseIOCostStat([]byte(bad)); err == nil {
			t.Errorf("%q accepted: %+v", bad, got)
		}
	}
}

// Stacks as Debian 12's kernel (6.1) prints them in /proc/PID/task/TID/stack.
const (
	ext4Fsync = `[<0>] jbd2_log_wait_commit+0xac/0x120 [jbd2]
[<0>] ext4_sync_file+0x1a9/0x390 [ext4]
[<0>] __x64_sys_fdatasync+0x48/0x90
[<0>] do_syscall_64+0x58/0xc0
[<0>] entry_SYSCALL_64_after_hwframe+0x64/0xce
`
	xfsFsync = `[<0>] xlog_wait_on_iclog+0x15e/0x180 [xfs]
[<0>] xfs_log_force_seq+0x8f/0x150 [xfs]
[<0>] xfs_file_fsync+0x14e/0x220 [xfs]
[<0>] __x64_sys_fdatasync+0x48/0x90
[<0>] do_syscall_64+0x58/0xc0
[<0>] entry_SYSCALL_64_after_hwframe+0x64/0xce
`
	ext4Folded = "entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_fdatasync;ext4_sync_file;jbd2_log_wait_commit"
	xfsFolded  = "entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_fdatasync;xfs_file_fsync;xfs_log_force_seq;xlog_wait_on_iclog"
)

func TestFoldStack(t *testing.T) {
	for _, c := range []struct{ stack, want string }{
		{ext4Fsync, ext4Folded},
		{xfsFsync, xfsFolded},
		// Addresses shown (kptr_restrict 0), no module, no trailing newline.
		{"[<ffffffff9a1b2c3d>] io_schedule+0x12/0x40\n[<ffffffff9a1b0000>] folio_wait_bit_common+0x13d/0x350", "folio_wait_bit_common;io_schedule"},
		{"[<0>] wait_on_page_writeback.part.0+0x10/0x20\n", "wait_on_page_writeback.part.0"},
		{"", ""},
		{"\n", ""},
	} {
		if got := FoldStack([]byte(c.stack)); got != c.want {
			t.Errorf("FoldStack(%q) = %q, want %q", c.stack, got, c.want)
		}
	}
}

func TestParseInflight(t *testing.T) {
	r, w, err := ParseInflight([]byte("       3       17\n"))
	if err != nil || r != 3 || w != 17 {
		t.Errorf("got %d %d %v", r, w, err)
	}
	for _, bad := range []string{"", "3", "3 x", "-1 2", "1 2 3"} {
		if _, _, err := ParseInflight([]byte(bad)); err == nil {
			t.Errorf("ParseInflight(%q) accepted", bad)
		}
	}
}

func TestParseTIDs(t *testing.T) {
	got, err := ParseTIDs([]byte("812\n813\n900\n"))
	if err != nil || len(got) != 3 || got[0] != 812 || got[2] != 900 {
		t.Errorf("got %v %v", got, err)
	}
	if got, err := ParseTIDs(nil); err != nil || len(got) != 0 {
		t.Errorf("empty cgroup: %v %v", got, err)
	}
	if _, err := ParseTIDs([]byte("12\nx\n")); err == nil {
		t.Error("bad thread id accepted")
	}
}

func TestBucket(t *testing.T) {
	for n, want := range map[int]string{-1: "0", 0: "0", 1: "1", 2: "2", 3: "3-4", 4: "3-4", 5: "5-8", 8: "5-8",
		9: "9-16", 16: "9-16", 17: "17-32", 32: "17-32", 33: ">32", 1000: ">32"} {
		if got := Buckets[Bucket(n)]; got != want {
			t.Errorf("Bucket(%d) = %s, want %s", n, got, want)
		}
	}
}

// aggregated is four samples of etcd (two threads) and fio (one) with
// the disk's queue at 0, 1, 5 and 40 writes.
func aggregated() Summary {
	a := NewAggregate([]string{"etcd", "fio"})
	a.BeginSample()
	a.Thread("etcd", 10, 'S', 0, "")
	a.Thread("etcd", 11, 'D', 0, xfsFolded)
	a.Thread("fio", 20, 'D', 0, xfsFolded)
	a.Inflight(0, 0)
	a.BeginSample()
	a.Thread("etcd", 10, 'D', 0, xfsFolded)
	a.Thread("etcd", 11, 'D', 12, ext4Folded)
	a.Thread("fio", 20, 'R', 0, "")
	a.Thread("other", 99, 'D', 0, "x") // not a group: ignored
	a.Inflight(1, 1)
	a.BeginSample()
	a.Thread("etcd", 10, 'S', 0, "")
	a.Thread("etcd", 11, 'S', 0, "")
	a.Thread("fio", 20, 'D', 0, NoStack)
	a.Inflight(0, 5)
	a.BeginSample()
	a.Thread("etcd", 12, 'D', 0, xfsFolded)
	a.InflightError()
	a.Error("vda inflight: gone")
	// etcd's thread 11 ran 0.12 s between its samples; etcd's cgroup
	// read four times, iocost on (its figures) in the middle two, and
	// the guest read twice, 4 s apart; fio's once (no
	// figures), and a name that is no group is ignored.
	t0 := time.Unix(1e9, 0)
	a.Counters("etcd", t0, Counters{UsedUS: 1e6, CPUSomeUS: 0, IOSomeUS: 1e5})
	a.Counters("etcd", t0.Add(1*time.Second), Counters{UsedUS: 1e6, CPUSomeUS: 0, IOSomeUS: 1e5, IOCost: &IOCostCounters{}})
	a.Counters("etcd", t0.Add(4*time.Second), Counters{UsedUS: 3e6, CPUSomeUS: 1e6, IOSomeUS: 3e5, IOCost: &IOCostCounters{WaitUS: 1.5e6, DebtUS: 3e4}})
	a.Counters("etcd", t0.Add(5*time.Second), Counters{UsedUS: 3e6, CPUSomeUS: 1e6, IOSomeUS: 3e5})
	a.Counters("fio", t0, Counters{UsedUS: 1})
	a.Counters("other", t0, Counters{UsedUS: 1})
	a.Counters(GuestName, t0, Counters{UsedUS: 0, CPUs: 2})
	a.Counters(GuestName, t0.Add(4*time.Second), Counters{UsedUS: 6e6, CPUSomeUS: 2e6, IOSomeUS: 4e5, CPUs: 2})
	s := a.Summary()
	s.Disk, s.IntervalMS, s.Seconds = "vda", 100, 0.3
	return s
}

func TestAggregate(t *testing.T) {
	s := aggregated()
	if s.Samples != 4 || s.InflightErrors != 1 || s.Errors["vda inflight: gone"] != 1 {
		t.Fatalf("summary %+v", s)
	}
	if got, want := s.WritesInflight, []int{1, 1, 0, 0, 1, 0, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("writes in flight %v, want %v", got, want)
	}
	if got, want := s.ReadsInflight, []int{2, 1, 0, 0, 0, 0, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("reads in flight %v, want %v", got, want)
	}
	etcd, fio := s.Groups[0], s.Groups[1]
	if etcd.Name != "etcd" || etcd.Threads != 3 || etcd.ThreadSamps != 7 || etcd.SamplesD != 3 || etcd.States["D"] != 4 || etcd.States["S"] != 3 {
		t.Errorf("etcd %+v", etcd)
	}
	// Most first, ties by name.
	if len(etcd.Stacks) != 2 || etcd.Stacks[0] != (Stack{xfsFolded, 3}) || etcd.Stacks[1] != (Stack{ext4Folded, 1}) {
		t.Errorf("etcd stacks %+v", etcd.Stacks)
	}
	if fio.CPU != nil {
		t.Errorf("fio read once has CPU figures %+v", fio.CPU)
	}
	if fio.Threads != 1 || fio.SamplesD != 2 || fio.States["R"] != 1 || len(fio.Stacks) != 2 || fio.Stacks[0] != (Stack{NoStack, 1}) {
		t.Errorf("fio %+v", fio)
	}
}

func TestRender(t *testing.T) {
	var b strings.Builder
	if err := aggregated().Render(&b, 1); err != nil {
		t.Fatal(err)
	}
	want := `kstacks: 4 samples over 0.3 s (asked every 100 ms, got one every 100.0 ms)
guest: used 1.50 CPUs of 2; some task waited for a CPU 500 ms/s, for I/O 100 ms/s (over 4 s)

etcd: 3 threads; 3 of 4 samples (75.0%) with a thread in D; thread-samples by state: D 4, S 3
  threads: used 0.40 CPUs
  cgroup: used 0.40 CPUs; some task waited for a CPU 200 ms/s, for I/O 40 ms/s (over 5 s)
  iocost: bios waited for budget 500 ms/s, in debt 10 ms/s, tasks delayed 0 ms/s (over 3 s)
       3  75.0%  ` + xfsFolded + `
       1  25.0%  (1 more stacks)

fio: 1 threads; 2 of 4 samples (50.0%) with a thread in D; thread-samples by state: D 2, R 1
  threads: used 0.00 CPUs
       1  50.0%  (running when its stack was read)
       1  50.0%  (1 more stacks)

vda: requests in flight (dispatched to the device), share of 4 samples (1 unreadable)
             0      1      2    3-4    5-8   9-16  17-32    >32
writes   25.0%  25.0%   0.0%   0.0%  25.0%   0.0%   0.0%   0.0%
reads    50.0%  25.0%   0.0%   0.0%   0.0%   0.0%   0.0%   0.0%

unreadable: vda inflight: gone (x1)
`
	// fio's two stacks both count 1: by name, NoStack's "(" first.
	if b.String() != want {
		t.Errorf("Render:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestDecode(t *testing.T) {
	good, err := json.Marshal(aggregated())
	if err != nil {
		t.Fatal(err)
	}
	s, err := Decode(good, "etcd", "fio")
	if err != nil || s.Samples != 4 || len(s.Groups) != 2 || s.Groups[0].Stacks[0].Count != 3 {
		t.Fatalf("Decode: %+v %v", s, err)
	}
	spoil := func(f func(*Summary)) []byte {
		s := aggregated()
		f(&s)
		b, _ := json.Marshal(s)
		return b
	}
	for name, c := range map[string]struct {
		b    []byte
		need []string
	}{
		"not json":               {[]byte("kstacks: 4 samples"), nil},
		"no sample":              {spoil(func(s *Summary) { s.Samples = 0 }), nil},
		"no such group":          {good, []string{"etcd", "jbd2"}},
		"group without a thread": {spoil(func(s *Summary) { s.Groups[1].Threads = 0 }), []string{"fio"}},
		"short histogram":        {spoil(func(s *Summary) { s.WritesInflight = s.WritesInflight[:3] }), nil},
	} {
		if _, err := Decode(c.b, c.need...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The agent's PSI parser, as the sampler uses it.
func TestPressureSome(t *testing.T) {
	for in, want := range map[string]int64{
		"some avg10=0.00 avg60=0.00 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n": 123,
		"full avg10=0.00 total=7\nsome avg10=2.50 avg60=1.00 avg300=0.10 total=9000000000\n":                 9000000000,
		"some total=0\n": 0,
		"":               -1,
		"full total=7\n": -1,
		"some avg10=0.00 avg60=0.00 avg300=0.00\n": -1,
		"some avg10=0.00 total=-5\n":               -1,
		"some avg10=0.00 total=x\nfull total=1\n":  -1,
	} {
		got, err := pressureSome([]byte(in))
		if want < 0 {
			if err == nil {
				t.Errorf("%q: %d, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
}

func TestParseCPUStatUsage(t *testing.T) {
	got, err := ParseCPUStatUsage([]byte("usage_usec 4242\nuser_usec 4000\nsystem_usec 242\nnr_periods 0\n"))
	if err != nil || got != 4242 {
		t.Errorf("usage %d %v, want 4242", got, err)
	}
	for _, bad := range []string{"", "user_usec 4000\n", "usage_usec x\n", "usage_usec -1\n"} {
		if _, err := ParseCPUStatUsage([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	// busy: user 10 + nice 20 + system 30 + irq 60 + softirq 70 + steal 80
	// ticks (idle 40 and iowait 50 are not), at 10 ms a tick.
	good := "cpu  10 20 30 40 50 60 70 80 90 100\ncpu0 5 10 15 20 25 30 35 40 45 50\ncpu1 5 10 15 20 25 30 35 40 45 50\nintr 1\nctxt 2\nbtime 3\n"
	busy, cpus, err := ParseProcStat([]byte(good))
	if err != nil || busy != 2_700_000 || cpus != 2 {
		t.Errorf("busy %d us on %d CPUs (%v), want 2700000 on 2", busy, cpus, err)
	}
	for _, bad := range []string{"", "cpu  1 2 3\ncpu0 1 2 3 4 5 6 7 8\n", "cpu  1 2 3 4 5 6 7 x\ncpu0 1 2 3 4 5 6 7 8\n", "cpu  1 2 3 4 5 6 7 8\n"} {
		if _, _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

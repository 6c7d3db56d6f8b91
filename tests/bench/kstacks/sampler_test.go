package kstacks

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// guestRoot writes files (path under root -> content) into a directory
// that stands in for the guest's / .
func guestRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		write(t, root, p, body)
	}
	return root
}

func write(t *testing.T, root, p, body string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	etcdDir    = "sys/fs/cgroup/system.slice/bench-etcd.service"
	etcdCgroup = etcdDir + "/cgroup.threads"
)

// procStat is a two-CPU /proc/stat whose "cpu" line has user ticks of
// busy time (the rest spread over nice, system, irq, softirq, steal: all
// busy) and idle ticks of idle and iowait.
func procStat(user, idle int) string {
	return fmt.Sprintf("cpu  %d 1 2 %d 5 3 4 6 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\ncpu1 1 1 1 1 1 1 1 1 0 0\nintr 1 2 3\nctxt 99\n", user, idle)
}

// statLine is a /proc/PID/task/TID/stat line of a thread in state whose
// utime + stime is ticks (all of it utime).
func statLine(tid int, comm string, state byte, ticks int64) string {
	return fmt.Sprintf("%d (%s) %c 1 %d %d 0 -1 4194560 10 0 0 0 %d 0 0 0 20 0 1 0 100 0 0\n", tid, comm, state, tid, tid, ticks)
}

// A guest with etcd's unit (threads 100 and 101), a journal thread (200)
// and a shell (300) that no target names.
func fixture(t *testing.T) string {
	return guestRoot(t, map[string]string{
		etcdCgroup:                "100\n101\n",
		"proc/100/task/100/stat":  statLine(100, "etcd", 'S', 0),
		"proc/101/task/101/stat":  statLine(101, "etcd (wal) x", 'D', 0),
		"proc/101/task/101/stack": xfsFsync,
		"proc/200/comm":           "jbd2/vda3-8\n",
		"proc/200/task/200/stat":  statLine(200, "jbd2/vda3-8", 'D', 10),
		"proc/200/task/200/stack": "[<0>] jbd2_journal_commit_transaction+0x1/0x2 [jbd2]\n[<0>] kjournald2+0x1/0x2 [jbd2]\n[<0>] kthread+0x1/0x2\n",
		"proc/300/comm":           "bash\n",
		"proc/300/task/300/stat":  statLine(300, "bash", 'D', 0),
		"proc/self":               "not a pid",
		"sys/block/vda/inflight":  "       0        3\n",
		etcdDir + "/cpu.stat":     "usage_usec 1000000\nuser_usec 600000\nsystem_usec 400000\n",
		etcdDir + "/io.stat":      "254:0 rbytes=0 wbytes=4096 rios=0 wios=1 dbytes=0 dios=0 cost.vrate=100.00 cost.usage=5 cost.wait=100000 cost.indebt=0 cost.indelay=0\n",
		etcdDir + "/cpu.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=50000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		etcdDir + "/io.pressure":  "some avg10=0.00 avg60=0.00 avg300=0.00 total=70000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=60000\n",
		"proc/stat":               procStat(100, 50),
		"proc/pressure/cpu":       "some avg10=1.00 avg60=0.00 avg300=0.00 total=1000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"proc/pressure/io":        "some avg10=0.00 avg60=0.00 avg300=0.00 total=2000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"sys/block/vdb/inflight":  "       9        9\n",
	})
}

func fixtureConfig(t *testing.T) Config {
	c, err := ParseFlags([]string{"-disk", "vda", "-out", "/x.json",
		"-cgroup", "etcd=system.slice/bench-etcd.service", "-comm", "jbd2=jbd2/*"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSampler(t *testing.T) {
	root := fixture(t)
	s := NewSampler(root, fixtureConfig(t))
	defer s.Close()
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	clock := t0
	s.now = func() time.Time { return clock }
	s.Rescan()
	s.Sample()
	// The files change under the open descriptors, as the kernel's do.
	write(t, root, "proc/101/task/101/stat", statLine(101, "etcd (wal) x", 'S', 0))
	write(t, root, "proc/100/task/100/stat", statLine(100, "etcd", 'D', 30))
	write(t, root, "proc/100/task/100/stack", "") // ran again before the read
	write(t, root, "sys/block/vda/inflight", "1 40\n")
	s.Sample()
	// Thread 101 exits (its cgroup no longer lists it), 102 starts.
	write(t, root, etcdCgroup, "100\n102\n")
	write(t, root, "proc/102/task/102/stat", statLine(102, "etcd", 'D', 7))
	write(t, root, "proc/102/task/102/stack", ext4Fsync)
	// A second journal (a filesystem mounted later) is found too.
	write(t, root, "proc/201/comm", "jbd2/vda4-8\n")
	write(t, root, "proc/201/task/201/stat", statLine(201, "jbd2/vda4-8", 'D', 500))
	// jbd2/vda3-8 ran half a second; 201's 5 s came before it was seen.
	write(t, root, "proc/200/task/200/stat", statLine(200, "jbd2/vda3-8", 'D', 60))
	write(t, root, "proc/201/task/201/stack", readFile(t, root, "proc/200/task/200/stack"))
	// Two seconds on: etcd used 1.5 s of CPU, waited 0.4 s for one and
	// 0.2 s for I/O; the guest was busy 300 ticks (3 s of its 2 CPUs).
	clock = t0.Add(2 * time.Second)
	write(t, root, etcdDir+"/cpu.stat", "usage_usec 2500000\n")
	write(t, root, etcdDir+"/cpu.pressure", "some avg10=9.00 avg60=0.00 avg300=0.00 total=450000\nfull total=0\n")
	write(t, root, etcdDir+"/io.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=270000\n")
	write(t, root, "proc/stat", procStat(400, 150))
	// Its bios waited for iocost's budget 0.3 s (on two disks), it was
	// in debt 20 ms.
	write(t, root, etcdDir+"/io.stat", "254:0 rbytes=0 cost.vrate=100.00 cost.wait=300000 cost.indebt=20000 cost.indelay=0\n254:16 cost.wait=100000\n")
	write(t, root, "proc/pressure/cpu", "some avg10=1.00 avg60=0.00 avg300=0.00 total=1201000\n")
	s.Rescan()
	s.Sample()

	sum := s.Summary()
	if sum.Disk != "vda" || sum.Samples != 3 || len(sum.Errors) != 0 {
		t.Fatalf("summary %+v", sum)
	}
	etcd, jbd2 := sum.Groups[0], sum.Groups[1]
	if etcd.Threads != 3 || etcd.ThreadSamps != 6 || etcd.SamplesD != 3 || etcd.States["D"] != 4 || etcd.States["S"] != 2 {
		t.Errorf("etcd %+v", etcd)
	}
	want := map[string]int{xfsFolded: 1, NoStack: 2, ext4Folded: 1}
	for _, st := range etcd.Stacks {
		if want[st.Stack] != st.Count {
			t.Errorf("etcd stack %q x%d, want x%d", st.Stack, st.Count, want[st.Stack])
		}
		delete(want, st.Stack)
	}
	if len(want) > 0 {
		t.Errorf("etcd stacks %+v lack %v", etcd.Stacks, want)
	}
	// The shell (300) is in D too, but no target names it.
	if jbd2.Name != "jbd2" || jbd2.Threads != 2 || jbd2.SamplesD != 3 || len(jbd2.Stacks) != 1 || jbd2.Stacks[0].Count != 4 ||
		jbd2.Stacks[0].Stack != "kthread;kjournald2;jbd2_journal_commit_transaction" {
		t.Errorf("jbd2 %+v", jbd2)
	}
	if w := sum.WritesInflight; w[Bucket(3)] != 1 || w[Bucket(40)] != 2 || sum.ReadsInflight[0] != 1 || sum.ReadsInflight[1] != 2 {
		t.Errorf("in flight: writes %v reads %v", sum.WritesInflight, sum.ReadsInflight)
	}
	if got, want := etcd.CPU, (CPUFigures{Seconds: 2, Used: 0.75, CPUWaitMS: 200, IOWaitMS: 100}); got == nil || got.IOCost == nil ||
		*got.IOCost != (IOCostFigures{Seconds: 2, WaitMS: 150, DebtMS: 10}) {
		t.Errorf("etcd's CPU %+v (iocost %+v), want %+v and iocost waits 150 ms/s, debt 10", got, got.IOCost, want)
	} else if got.IOCost = nil; *got != want {
		t.Errorf("etcd's CPU %+v, want %+v", got, want)
	}
	if etcd.ThreadsCPUSeconds != 0.3 || jbd2.ThreadsCPUSeconds != 0.5 {
		t.Errorf("threads' CPU: etcd %v s, jbd2 %v s; want 0.3 and 0.5", etcd.ThreadsCPUSeconds, jbd2.ThreadsCPUSeconds)
	}
	if jbd2.CPU != nil {
		t.Errorf("a comm target has CPU figures: %+v", jbd2.CPU)
	}
	if got, want := sum.Guest, (&CPUFigures{Seconds: 2, CPUs: 2, Used: 1.5, CPUWaitMS: 600, IOWaitMS: 0}); got == nil || *got != *want {
		t.Errorf("guest %+v, want %+v", got, want)
	}
}

// A wrong cgroup path or disk name is in the summary, and the bench's
// Decode refuses a target that never had a thread.
func TestSamplerWrongPaths(t *testing.T) {
	root := fixture(t)
	c := fixtureConfig(t)
	c.Targets[0].Cgroup = "system.slice/etcd.service"
	c.Disk = "sda"
	s := NewSampler(root, c)
	defer s.Close()
	s.Rescan()
	s.Sample()
	sum := s.Summary()
	// The cgroup's threads and its cpu.stat, and the disk's inflight.
	if sum.InflightErrors != 1 || len(sum.Errors) != 3 {
		t.Errorf("errors %v, inflight errors %d", sum.Errors, sum.InflightErrors)
	}
	b, err := jsonOf(sum)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(b, "etcd"); err == nil || !strings.Contains(err.Error(), "etcd.service/cgroup.threads") {
		t.Errorf("Decode: %v, want the unreadable cgroup named", err)
	}
}

func TestParseFlags(t *testing.T) {
	c, err := ParseFlags([]string{"-interval", "50ms", "-disk", "vdb", "-out", "o.json",
		"-cgroup", "fio=system.slice/bench-fio.service", "-comm", "jbd2=jbd2/*"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 50*time.Millisecond || c.Rescan != time.Second || c.Disk != "vdb" || c.Out != "o.json" || len(c.Targets) != 2 ||
		c.Targets[0] != (Target{Name: "fio", Cgroup: "system.slice/bench-fio.service"}) || c.Targets[1] != (Target{Name: "jbd2", Comm: "jbd2/*"}) {
		t.Errorf("config %+v", c)
	}
	base := []string{"-disk", "vda", "-out", "o", "-cgroup", "etcd=system.slice/bench-etcd.service"}
	for name, args := range map[string][]string{
		"no out":            {"-disk", "vda", "-cgroup", "e=x"},
		"no disk":           {"-out", "o", "-cgroup", "e=x"},
		"disk path":         {"-disk", "/dev/vda", "-out", "o", "-cgroup", "e=x"},
		"no target":         {"-disk", "vda", "-out", "o"},
		"absolute cgroup":   append(base, "-cgroup", "f=/sys/fs/cgroup/x"),
		"cgroup outside":    append(base, "-cgroup", "f=../x"),
		"target without =":  append(base, "-comm", "jbd2"),
		"bad glob":          append(base, "-comm", "j=[x"),
		"name twice":        append(base, "-comm", "etcd=etcd"),
		"rescan < interval": append(base, "-rescan", "10ms"),
		"zero interval":     append(base, "-interval", "0s"),
		"unknown flag":      append(base, "-pid", "1"),
		"stray argument":    append(base, "vda"),
	} {
		if _, err := ParseFlags(args, io.Discard); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func jsonOf(s Summary) ([]byte, error) { return json.Marshal(s) }

func readFile(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A thread that leaves D while its stack is read waited somewhere that
// stack may no longer show: it is counted apart, not under that stack.
func TestSamplerThreadWokeDuringStackRead(t *testing.T) {
	root := fixture(t)
	s := NewSampler(root, fixtureConfig(t))
	defer s.Close()
	// Only thread 101 wakes: the journal thread 200 is in D too, and the
	// map's order decides which stack is read first.
	s.stackRead = func(dir string) {
		if dir == "proc/101/task/101" {
			write(t, root, "proc/101/task/101/stat", statLine(101, "etcd (wal) x", 'S', 0))
		}
	}
	s.Rescan()
	s.Sample()
	etcd := s.Summary().Groups[0]
	if etcd.States["D"] != 1 || len(etcd.Stacks) != 1 || etcd.Stacks[0] != (Stack{Woke, 1}) {
		t.Errorf("etcd %+v", etcd)
	}
}

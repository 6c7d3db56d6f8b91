package kstacks

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Sampler reads the targets' threads' states and, for those in D, their
// kernel stacks, and the disk's requests in flight. Every path is under
// root ("/" in the guest, a directory of fixtures in tests). It is cheap
// enough to run at 10 Hz beside what it measures: each thread's stat file
// stays open and is read with one pread per sample (kernel files are made
// afresh at each read from offset 0), into buffers reused across samples;
// /proc is walked only at a rescan, and only for comm targets, reading
// the comm of new processes only.
type Sampler struct {
	root     string
	targets  []Target
	disk     string
	agg      *Aggregate
	threads  map[int]*thread
	comms    map[int]string // pid -> comm, for comm targets
	inflight int            // fd, -1 when not open
	buf      []byte
	stack    []byte
	// stackRead runs after the stack of the thread in dir is read
	// (tests: that thread wakes).
	stackRead func(dir string)
	now       func() time.Time
}

type thread struct {
	group string
	dir   string // proc/PID/task/TID
	fd    int    // of dir/stat
}

// NewSampler samples c's targets and disk under root.
func NewSampler(root string, c Config) *Sampler {
	var names []string
	for _, t := range c.Targets {
		names = append(names, t.Name)
	}
	return &Sampler{root: root, targets: c.Targets, disk: c.Disk, agg: NewAggregate(names),
		threads: map[int]*thread{}, inflight: -1, buf: make([]byte, 1024), stack: make([]byte, 16<<10), now: time.Now}
}

func (s *Sampler) open(p string) (int, error) {
	fd, err := syscall.Open(filepath.Join(s.root, p), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: "/" + p, Err: err}
	}
	return fd, nil
}

// pread reads a kernel file whole: one read from offset 0.
func pread(fd int, buf []byte) ([]byte, error) {
	n, err := syscall.Pread(fd, buf, 0)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// Rescan finds the targets' threads: a new one's stat is opened, a gone
// one's closed, and reads the CPU counters (ReadCounters). What cannot be
// read is counted in the summary's errors (a target that never had a
// thread fails the bench's Decode).
func (s *Sampler) Rescan() {
	s.ReadCounters()
	if slices.ContainsFunc(s.targets, func(t Target) bool { return t.Comm != "" }) {
		if err := s.scanComms(); err != nil {
			s.agg.Error(err.Error())
		}
	}
	seen := map[int]bool{}
	for _, t := range s.targets {
		dirs, err := s.find(t)
		if err != nil {
			s.agg.Error(err.Error())
		}
		for tid, dir := range dirs {
			if seen[tid] {
				continue
			}
			seen[tid] = true
			if _, ok := s.threads[tid]; ok {
				continue
			}
			fd, err := s.open(dir + "/stat")
			if err != nil {
				continue // gone since it was listed
			}
			s.threads[tid] = &thread{group: t.Name, dir: dir, fd: fd}
		}
	}
	for tid, th := range s.threads {
		if !seen[tid] {
			s.drop(tid, th)
		}
	}
}

// ReadCounters reads the cgroup targets' and the guest's cumulative CPU
// use and pressure (Counters): once a rescan, and once more at the end,
// since the summary has the change between the first and last readings.
func (s *Sampler) ReadCounters() {
	at := s.now()
	read := func(p string, parse func([]byte) (int64, error), into *int64) bool {
		b, err := os.ReadFile(filepath.Join(s.root, p))
		if err == nil {
			*into, err = parse(b)
		}
		if err != nil {
			s.agg.Error(fmt.Sprintf("/%s: %v", p, err))
			return false
		}
		return true
	}
	for _, t := range s.targets {
		if t.Cgroup == "" {
			continue
		}
		var c Counters
		dir := path.Join("sys/fs/cgroup", t.Cgroup)
		if read(dir+"/cpu.stat", ParseCPUStatUsage, &c.UsedUS) &&
			read(dir+"/cpu.pressure", pressureSome, &c.CPUSomeUS) &&
			read(dir+"/io.pressure", pressureSome, &c.IOSomeUS) {
			// iocost's figures are optional: a disk without iocost, or
			// the debug stats off, has none.
			if b, err := os.ReadFile(filepath.Join(s.root, dir, "io.stat")); err == nil {
				if c.IOCost, err = ParseIOCostStat(b); err != nil {
					s.agg.Error(fmt.Sprintf("/%s/io.stat: %v", dir, err))
				}
			}
			s.agg.Counters(t.Name, at, c)
		}
	}
	var g Counters
	procStat := func(b []byte) (int64, error) {
		busy, cpus, err := ParseProcStat(b)
		g.CPUs = cpus
		return busy, err
	}
	if read("proc/stat", procStat, &g.UsedUS) &&
		read("proc/pressure/cpu", pressureSome, &g.CPUSomeUS) &&
		read("proc/pressure/io", pressureSome, &g.IOSomeUS) {
		s.agg.Counters(GuestName, at, g)
	}
}

func (s *Sampler) drop(tid int, th *thread) {
	syscall.Close(th.fd)
	delete(s.threads, tid)
}

// find lists the target's threads: thread id -> its proc directory.
func (s *Sampler) find(t Target) (map[int]string, error) {
	out := map[int]string{}
	if t.Cgroup != "" {
		p := path.Join("sys/fs/cgroup", t.Cgroup, "cgroup.threads")
		b, err := os.ReadFile(filepath.Join(s.root, p))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		tids, err := ParseTIDs(b)
		if err != nil {
			return nil, fmt.Errorf("%s: /%s: %w", t.Name, p, err)
		}
		for _, tid := range tids {
			// /proc/TID resolves for any thread, listed or not.
			out[tid] = fmt.Sprintf("proc/%d/task/%d", tid, tid)
		}
		return out, nil
	}
	for pid, comm := range s.comms {
		if ok, _ := path.Match(t.Comm, comm); !ok {
			continue
		}
		tasks, err := os.ReadDir(filepath.Join(s.root, "proc", strconv.Itoa(pid), "task"))
		if err != nil {
			continue // gone
		}
		for _, te := range tasks {
			if tid, err := strconv.Atoi(te.Name()); err == nil {
				out[tid] = fmt.Sprintf("proc/%d/task/%d", pid, tid)
			}
		}
	}
	return out, nil
}

// scanComms lists the processes in /proc and reads the comm of those not
// seen before: a process's comm is read once (a kernel thread's, what comm
// targets are for, never changes), so a rescan costs a walk of /proc's
// directory, not a read per process.
func (s *Sampler) scanComms() error {
	ents, err := os.ReadDir(filepath.Join(s.root, "proc"))
	if err != nil {
		return err
	}
	now := make(map[int]string, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, ok := s.comms[pid]
		if !ok {
			b, err := os.ReadFile(filepath.Join(s.root, "proc", e.Name(), "comm"))
			if err != nil {
				continue // gone
			}
			comm = strings.TrimSuffix(string(b), "\n")
		}
		now[pid] = comm
	}
	s.comms = now
	return nil
}

// Sample takes one sample: each known thread's state, the folded stack
// of each in D, and the disk's requests in flight.
func (s *Sampler) Sample() {
	s.agg.BeginSample()
	for tid, th := range s.threads {
		st, ticks, err := s.stat(th)
		if err != nil {
			s.drop(tid, th) // exited: its stat reads ESRCH
			continue
		}
		var stack string
		if st == 'D' {
			stack = s.readStack(th)
		}
		s.agg.Thread(th.group, tid, st, ticks, stack)
	}
	if s.inflight < 0 {
		fd, err := s.open(path.Join("sys/block", s.disk, "inflight"))
		if err != nil {
			s.agg.Error(err.Error())
			s.agg.InflightError()
			return
		}
		s.inflight = fd
	}
	b, err := pread(s.inflight, s.buf)
	var r, w int
	if err == nil {
		r, w, err = ParseInflight(b)
	}
	if err != nil {
		s.agg.Error(fmt.Sprintf("%s inflight: %v", s.disk, err))
		s.agg.InflightError()
		return
	}
	s.agg.Inflight(r, w)
}

func (s *Sampler) stat(th *thread) (state byte, cpuTicks int64, err error) {
	b, err := pread(th.fd, s.buf)
	if err != nil {
		return 0, 0, err
	}
	return ParseStat(b)
}

// readStack is th's folded kernel stack, or why it has none: a thread
// that ran again before (no stack) or while (no longer in D) its stack was
// read waited somewhere the stack no longer shows.
func (s *Sampler) readStack(th *thread) string {
	fd, err := s.open(th.dir + "/stack")
	if err != nil {
		s.agg.Error(err.Error())
		return NoStack
	}
	b, err := pread(fd, s.stack)
	syscall.Close(fd)
	if err != nil {
		s.agg.Error(fmt.Sprintf("/%s/stack: %v", th.dir, err))
		return NoStack
	}
	if s.stackRead != nil {
		s.stackRead(th.dir)
	}
	folded := FoldStack(b)
	if folded == "" {
		return NoStack
	}
	if st, _, err := s.stat(th); err != nil || st != 'D' {
		return Woke
	}
	return folded
}

// Summary is what was sampled so far; the caller sets the times.
func (s *Sampler) Summary() Summary {
	sum := s.agg.Summary()
	sum.Disk = s.disk
	return sum
}

// Close closes the files the sampler keeps open.
func (s *Sampler) Close() {
	for tid, th := range s.threads {
		s.drop(tid, th)
	}
	if s.inflight >= 0 {
		syscall.Close(s.inflight)
		s.inflight = -1
	}
}

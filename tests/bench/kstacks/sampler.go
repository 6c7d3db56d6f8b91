package kstacks

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Target is one group of threads to sample: the threads of a cgroup (its
// cgroup.threads; a unit's, so a process that forks, as fio does for its
// job, is covered whole) or of the processes whose comm matches a glob
// (kernel threads such as ext4's jbd2/DEV-8).
type Target struct {
	Name   string
	Cgroup string // under /sys/fs/cgroup, e.g. "system.slice/bench-etcd.service"
	Comm   string // path.Match pattern, e.g. "jbd2/*"
}

// Config is the sampler's command line.
type Config struct {
	Interval time.Duration // between samples
	Rescan   time.Duration // between looks for the targets' threads
	Disk     string        // block device name: /sys/block/DISK/inflight
	Out      string        // the JSON summary, written at SIGTERM/SIGINT
	Targets  []Target
}

// ParseFlags reads the sampler's arguments (without the program name).
func ParseFlags(args []string, stderr io.Writer) (Config, error) {
	c := Config{}
	fs := flag.NewFlagSet("kstacks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&c.Interval, "interval", 100*time.Millisecond, "time between samples")
	fs.DurationVar(&c.Rescan, "rescan", time.Second, "time between looks for new or gone threads")
	fs.StringVar(&c.Disk, "disk", "", "block device whose requests in flight are sampled (vda)")
	fs.StringVar(&c.Out, "out", "", "summary file (JSON), written on SIGTERM or SIGINT")
	target := func(kind string) func(string) error {
		return func(v string) error {
			name, val, ok := strings.Cut(v, "=")
			if !ok || name == "" || val == "" {
				return fmt.Errorf("want NAME=%s", strings.ToUpper(kind))
			}
			t := Target{Name: name}
			if kind == "cgroup" {
				if path.IsAbs(val) || path.Clean(val) != val || strings.HasPrefix(val, "..") {
					return fmt.Errorf("cgroup %q: want a clean path under /sys/fs/cgroup", val)
				}
				t.Cgroup = val
			} else {
				if _, err := path.Match(val, ""); err != nil {
					return fmt.Errorf("comm pattern %q: %w", val, err)
				}
				t.Comm = val
			}
			c.Targets = append(c.Targets, t)
			return nil
		}
	}
	fs.Func("cgroup", "NAME=PATH: sample the threads of the cgroup /sys/fs/cgroup/PATH as NAME (repeatable)", target("cgroup"))
	fs.Func("comm", "NAME=GLOB: sample the processes whose comm matches GLOB as NAME (repeatable)", target("comm"))
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	var names []string
	for _, t := range c.Targets {
		if slices.Contains(names, t.Name) {
			return Config{}, fmt.Errorf("target %s named twice", t.Name)
		}
		names = append(names, t.Name)
	}
	switch {
	case fs.NArg() > 0:
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.Out == "":
		return Config{}, errors.New("-out is required")
	case c.Disk == "" || strings.Contains(c.Disk, "/"):
		return Config{}, fmt.Errorf("-disk %q: want a block device name such as vda", c.Disk)
	case len(c.Targets) == 0:
		return Config{}, errors.New("no -cgroup or -comm target")
	case c.Interval <= 0 || c.Rescan < c.Interval:
		return Config{}, fmt.Errorf("-interval %v, -rescan %v: want 0 < interval <= rescan", c.Interval, c.Rescan)
	}
	return c, nil
}

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
	// stackRead runs after a stack is read (tests: the thread wakes).
	stackRead func()
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
		threads: map[int]*thread{}, inflight: -1, buf: make([]byte, 1024), stack: make([]byte, 16<<10)}
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
// one's closed. What cannot be read is counted in the summary's errors
// (a target that never had a thread fails the bench's Decode).
func (s *Sampler) Rescan() {
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
		st, err := s.state(th)
		if err != nil {
			s.drop(tid, th) // exited: its stat reads ESRCH
			continue
		}
		var stack string
		if st == 'D' {
			stack = s.readStack(th)
		}
		s.agg.Thread(th.group, tid, st, stack)
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

func (s *Sampler) state(th *thread) (byte, error) {
	b, err := pread(th.fd, s.buf)
	if err != nil {
		return 0, err
	}
	return ParseState(b)
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
		s.stackRead()
	}
	folded := FoldStack(b)
	if folded == "" {
		return NoStack
	}
	if st, err := s.state(th); err != nil || st != 'D' {
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

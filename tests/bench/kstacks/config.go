package kstacks

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
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

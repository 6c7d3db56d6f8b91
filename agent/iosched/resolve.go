// Package iosched selects an I/O scheduler (bfq) and a shallower queue on
// the disks behind the staging paths for the staging window only, records
// what it changed so a restart after a crash puts it back, and restores it.
package iosched

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// Resolver finds the whole disks behind paths.
type Resolver struct {
	// SysRoot is where sysfs is mounted ("/sys"); tests use a fake tree.
	SysRoot string
	// Stat returns the device number of the file system holding path; nil
	// uses stat(2).
	Stat func(path string) (major, minor uint32, err error)
	// MountInfo is the mount table Filesystems reads ("":
	// /proc/self/mountinfo).
	MountInfo string
}

func statDev(path string) (uint32, uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	return unix.Major(st.Dev), unix.Minor(st.Dev), nil
}

// Disks returns the sorted, distinct kernel names ("vda", "nvme0n1") of the
// whole disks holding paths, through partitions and stacked devices
// (device-mapper, LUKS, LVM, md).
func (r Resolver) Disks(paths []string) ([]string, error) {
	stat := r.Stat
	if stat == nil {
		stat = statDev
	}
	seen := map[string]bool{}
	for _, p := range paths {
		maj, min, err := stat(p)
		if err != nil {
			return nil, fmt.Errorf("finding the disk behind %s: %w", p, err)
		}
		if maj == 0 {
			return nil, fmt.Errorf("finding the disk behind %s: its file system has no block device (dev 0:%d)", p, min)
		}
		disks, err := r.DisksOf(maj, min)
		if err != nil {
			return nil, fmt.Errorf("finding the disk behind %s: %w", p, err)
		}
		for _, d := range disks {
			seen[d] = true
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out, nil
}

// DisksOf resolves device MAJ:MIN to whole disks.
func (r Resolver) DisksOf(major, minor uint32) ([]string, error) {
	root := r.SysRoot
	if root == "" {
		root = "/sys"
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(root, "dev", "block", fmt.Sprintf("%d:%d", major, minor)))
	if err != nil {
		return nil, fmt.Errorf("device %d:%d: %w", major, minor, err)
	}
	var out []string
	if err := walkToDisks(dir, 0, &out); err != nil {
		return nil, fmt.Errorf("device %d:%d: %w", major, minor, err)
	}
	return out, nil
}

// walkToDisks follows slaves/ (stacked devices) and partition -> parent
// until it reaches devices with a request queue of their own.
func walkToDisks(dir string, depth int, out *[]string) error {
	if depth > 16 {
		return fmt.Errorf("%s: device stack too deep", dir)
	}
	slaves, err := os.ReadDir(filepath.Join(dir, "slaves"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(slaves) > 0 {
		for _, s := range slaves {
			sd, err := filepath.EvalSymlinks(filepath.Join(dir, "slaves", s.Name()))
			if err != nil {
				return err
			}
			if err := walkToDisks(sd, depth+1, out); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		return walkToDisks(filepath.Dir(dir), depth+1, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "queue", "scheduler")); err != nil {
		return fmt.Errorf("%s: not a disk with a request queue: %w", filepath.Base(dir), err)
	}
	*out = append(*out, filepath.Base(dir))
	return nil
}

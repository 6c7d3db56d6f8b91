package iosched

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Filesystem is the mounted file system that holds a path.
type Filesystem struct {
	Path       string
	MountPoint string
	Type       string   // "xfs", "ext4"
	Options    []string // the super block's options ("data=writeback")
}

// OrdersData says whether the file system's journal makes an fsync wait
// for other files' data: ext3 and ext4 in data=ordered (the default, not
// listed in the options) or data=journal mode commit a transaction only
// after the data of the blocks it allocated is written, the stager's
// included. A write cap on the stager then slows etcd's fsync too
// (measured: at a 1 MB/s cap etcd's WAL fsync p99 was worse than with no
// pacing at all).
func (f Filesystem) OrdersData() bool {
	if f.Type != "ext4" && f.Type != "ext3" {
		return false
	}
	return !slices.Contains(f.Options, "data=writeback")
}

func (f Filesystem) String() string {
	mode := ""
	if f.Type == "ext4" || f.Type == "ext3" {
		mode = " data=ordered"
		for _, o := range f.Options {
			if strings.HasPrefix(o, "data=") {
				mode = " " + o
			}
		}
	}
	return fmt.Sprintf("%s (%s%s at %s)", f.Path, f.Type, mode, f.MountPoint)
}

// Filesystems returns the file system holding each path, read from the
// mount table by the path's device number.
func (r Resolver) Filesystems(paths []string) ([]Filesystem, error) {
	mountInfo := r.MountInfo
	if mountInfo == "" {
		mountInfo = "/proc/self/mountinfo"
	}
	stat := r.Stat
	if stat == nil {
		stat = statDev
	}
	data, err := os.ReadFile(mountInfo)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	var out []Filesystem
	for _, p := range paths {
		maj, min, err := stat(p)
		if err != nil {
			return nil, fmt.Errorf("finding the file system of %s: %w", p, err)
		}
		f, ok, err := findMount(string(data), maj, min)
		if err != nil {
			return nil, fmt.Errorf("finding the file system of %s in %s: %w", p, mountInfo, err)
		}
		if !ok {
			return nil, fmt.Errorf("finding the file system of %s: device %d:%d is not in %s", p, maj, min, mountInfo)
		}
		f.Path = p
		out = append(out, f)
	}
	return out, nil
}

// findMount finds the first mount of device maj:min in a mountinfo text
// (proc(5): "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root
// rw,errors=continue"). Bind mounts of one file system share its type
// and super options, so the first is as good as any.
func findMount(text string, maj, min uint32) (Filesystem, bool, error) {
	want := strconv.FormatUint(uint64(maj), 10) + ":" + strconv.FormatUint(uint64(min), 10)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != want {
			continue
		}
		sep := slices.Index(fields, "-")
		if sep < 5 || len(fields) < sep+4 {
			return Filesystem{}, false, fmt.Errorf("line %d: malformed: %q", n, sc.Text())
		}
		return Filesystem{MountPoint: unescape(fields[4]), Type: fields[sep+1], Options: strings.Split(fields[sep+3], ",")}, true, nil
	}
	return Filesystem{}, false, sc.Err()
}

// unescape undoes mountinfo's octal escapes ("\040" for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

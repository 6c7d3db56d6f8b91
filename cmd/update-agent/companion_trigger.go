package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/update-agent/update-agent/agent/guard"
)

// Companion mode's trigger: rpm-ostree status is too dear to run every
// second on an idle host, and every 5 s opens the window after the pull
// has dirtied much of the update in the page cache. rpm-ostreed's own
// cgroup says at once when it writes: its memory.stat's file_dirty and
// file_writeback (page cache the daemon dirtied, not yet on disk: the
// pull's objects; status and the other queries write none). Reading one
// kept-open cgroup file a few times a second is what the idle agent can
// afford; the status look it triggers is rate-limited.

// rpmOstreedCgroup is rpm-ostreed.service's cgroup (relative to the
// cgroup2 mount) where systemd reports none, the daemon not running: the
// unit ships no Slice=, so systemd puts it in system.slice.
const rpmOstreedCgroup = "/system.slice/rpm-ostreed.service"

// triggerBytes is how much dirty page cache rpm-ostreed holds before a
// rise says it writes: the daemon's own small files stay below it.
const triggerBytes = 2 << 20

// triggerSample is one read of rpm-ostreed's cgroup.
type triggerSample struct {
	// Present: the cgroup exists (rpm-ostreed exits when idle and its
	// cgroup goes with it: absent is idle).
	Present bool
	// Pending is file_dirty + file_writeback, bytes.
	Pending uint64
}

// triggerWriting is the trigger's decision: rpm-ostreed started writing
// (a transaction pulls or writes a deployment) between prev and cur: it
// holds at least triggerBytes of dirty page cache, more than before. A
// level alone would fire for the 30 s the kernel keeps an old write
// dirty; a rise alone, for any small write.
func triggerWriting(prev, cur triggerSample) bool {
	if !cur.Present || cur.Pending < triggerBytes {
		return false
	}
	return !prev.Present || cur.Pending > prev.Pending
}

// parseTriggerStat reads file_dirty and file_writeback from memory.stat.
func parseTriggerStat(stat []byte) (uint64, error) {
	var sum uint64
	found := 0
	for line := range bytes.Lines(stat) {
		k, v, ok := bytes.Cut(bytes.TrimSuffix(line, []byte{'\n'}), []byte{' '})
		if !ok || (string(k) != "file_dirty" && string(k) != "file_writeback") {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("memory.stat %s: %w", k, err)
		}
		sum += n
		found++
	}
	if found != 2 {
		return 0, errors.New("memory.stat has no file_dirty and file_writeback lines")
	}
	return sum, nil
}

// cgroupTrigger reads the trigger from a unit's cgroup directory, its
// memory.stat kept open between reads.
type cgroupTrigger struct {
	dir  string
	stat guard.KernelFile
}

func newCgroupTrigger(dir string) *cgroupTrigger {
	return &cgroupTrigger{dir: dir, stat: guard.KernelFile{Path: filepath.Join(dir, "memory.stat")}}
}

func (c *cgroupTrigger) String() string { return c.stat.Path }

// Sample reads the cgroup now; its absence is a sample, not an error.
func (c *cgroupTrigger) Sample() (triggerSample, error) {
	b, err := c.stat.Read()
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(c.dir); derr == nil {
			return triggerSample{}, fmt.Errorf("%s: no memory.stat: the memory controller is off there", c.dir)
		}
		return triggerSample{}, nil
	}
	if err != nil {
		return triggerSample{}, fmt.Errorf("reading rpm-ostreed's cgroup: %w", err)
	}
	n, err := parseTriggerStat(b)
	if err != nil {
		return triggerSample{}, fmt.Errorf("%s: %w", c.stat.Path, err)
	}
	return triggerSample{Present: true, Pending: n}, nil
}

func (c *cgroupTrigger) Close() { c.stat.Close() }

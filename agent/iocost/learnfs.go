package iocost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/update-agent/update-agent/agent/atomicfile"
)

// DiskID names a disk by what survives a reboot and a rename: its WWN or
// serial where the driver gives one (virtio's "serial", NVMe and SCSI
// "wwid"/"serial" under device/), else its kernel name, with its size in
// sectors (a disk grown or replaced under the same serial learns again).
func (c Controller) DiskID(disk string) (string, error) {
	blk := filepath.Join(c.sys(), "block", disk)
	size, err := os.ReadFile(filepath.Join(blk, "size"))
	if err != nil {
		return "", fmt.Errorf("reading the size of %s: %w", disk, err)
	}
	id := "name:" + disk
	for _, f := range []string{"wwid", "device/wwid", "serial", "device/serial"} {
		if b, err := os.ReadFile(filepath.Join(blk, f)); err == nil && strings.TrimSpace(string(b)) != "" {
			id = filepath.Base(f) + ":" + strings.TrimSpace(string(b))
			break
		}
	}
	return id + "/" + strings.TrimSpace(string(size)), nil
}

// Vrate is the kernel's vrate on disk now (percent; the root cgroup's
// io.stat "cost.vrate", printed while iocost is on there).
func (c Controller) Vrate(disk string) (float64, error) {
	dev, err := c.Dev(disk)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(filepath.Join(c.cgroup(), "io.stat"))
	if err != nil {
		return 0, fmt.Errorf("reading iocost's vrate: %w", err)
	}
	v, ok := ParseVrates(string(b))[dev]
	if !ok {
		return 0, fmt.Errorf("reading iocost's vrate: io.stat has no cost.vrate for %s (%s)", disk, dev)
	}
	return v, nil
}

// LoadLearned reads the learned models (none yet: an empty set).
func (c Controller) LoadLearned() (LearnedSet, error) {
	var s LearnedSet
	if c.LearnedFile == "" {
		return s, nil
	}
	if _, err := atomicfile.ReadJSON(c.LearnedFile, &s); err != nil {
		return LearnedSet{}, fmt.Errorf("reading the learned iocost models: %w", err)
	}
	return s, nil
}

// SaveLearned writes them.
func (c Controller) SaveLearned(s LearnedSet) error {
	if c.LearnedFile == "" {
		return nil
	}
	if err := atomicfile.WriteJSON(c.LearnedFile, s); err != nil {
		return fmt.Errorf("saving the learned iocost models: %w", err)
	}
	return nil
}

package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/update-agent/update-agent/agent/iocost"
)

// IOControl reads which of the kernel's cgroup I/O controllers exist and
// what iocost has in force on a disk.
type IOControl interface {
	// IOCost is nil when the kernel has iocost, else why not.
	IOCost() error
	// IOLatency says whether the kernel has io.latency; an error when it
	// cannot tell (the io controller not enabled below the root).
	IOLatency() (bool, error)
	// InForce is the disk's io.cost.qos and io.cost.model lines ("":
	// iocost was never set up on it).
	InForce(disk string) (qos, model string, err error)
	// Learned is the model the stager learned on disk and keeps in
	// stateDir (iocost-learned.json); false when none.
	Learned(disk, stateDir string) (iocost.Learned, bool, error)
}

// ioControl reports iocost and io.latency, and the QoS and model in force
// on the staging disks (etcd's data directory's among them). Only a
// setting that silently does nothing fails: staging.etcd_io_latency_target
// on a kernel without io.latency (Debian 12's has none).
func (d Doctor) ioControl(context.Context) (string, error) {
	if d.IO == nil {
		return "not checked", nil
	}
	var disks []string
	if len(d.In.StagingPaths) > 0 && d.Disks != nil {
		var err error
		if disks, err = d.Disks.Disks(d.In.StagingPaths); err != nil {
			return "", err
		}
	}
	ordered, _ := d.orderedFilesystems(disks)
	ordersData := len(ordered) > 0
	used := iocost.Disks(d.In.IOCost, disks, d.In.IOCostModels, ordersData)
	withModel := iocost.Effective(d.In.IOCost, ordersData) == iocost.WithModel
	var parts []string
	costErr := d.IO.IOCost()
	switch err := costErr; {
	case err == nil && len(used) > 0 && withModel:
		parts = append(parts, fmt.Sprintf("iocost: yes, used while staging on %s (a model in staging.iocost_models)", strings.Join(used, ", ")))
	case err == nil && len(used) > 0:
		parts = append(parts, "iocost: yes, used while staging")
	case err == nil && withModel:
		parts = append(parts, fmt.Sprintf("iocost: yes, not used (%s and staging.iocost_models has no model for %s): the write rate loop paces staging",
			d.modeSaid(ordersData), orNone(disks)))
	case err == nil:
		parts = append(parts, fmt.Sprintf("iocost: yes, not used (%s)", d.modeSaid(ordersData)))
	case len(used) > 0:
		parts = append(parts, fmt.Sprintf("iocost: no (%v): the write rate loop paces staging", err))
	default:
		parts = append(parts, fmt.Sprintf("iocost: no (%v)", err))
	}
	lat, latErr := d.IO.IOLatency()
	switch {
	case latErr != nil:
		parts = append(parts, fmt.Sprintf("io.latency: unknown (%v)", latErr))
	case lat:
		parts = append(parts, "io.latency: yes")
	case d.In.EtcdIOLatencyTarget > 0:
		return "", fmt.Errorf("staging.etcd_io_latency_target is set but the kernel has no io.latency (CONFIG_BLK_CGROUP_IOLATENCY): it does nothing")
	default:
		parts = append(parts, "io.latency: no")
	}
	if costErr == nil {
		for _, disk := range disks {
			q, m, err := d.IO.InForce(disk)
			if err != nil {
				return "", fmt.Errorf("iocost on %s: %w", disk, err)
			}
			if q == "" {
				q = "never set up (off)"
			}
			if m == "" {
				m = "the kernel's auto model"
			}
			parts = append(parts, fmt.Sprintf("%s: qos %s; model %s", disk, q, m))
		}
	}
	return strings.Join(parts, "; "), nil
}

// modeSaid is staging.iocost as written, and what "auto" behaves as on
// the staging paths' journal (iocost.Effective).
func (d Doctor) modeSaid(ordersData bool) string {
	said := "staging.iocost = " + quoteMode(d.In.IOCost)
	if d.In.IOCost != iocost.Auto {
		return said
	}
	if ordersData {
		return said + " (as true: the journal orders data)"
	}
	return said + ` (as "with-model": the journal does not order data)`
}

// quoteMode writes a mode as TOML does: strings quoted.
func quoteMode(m iocost.Mode) string {
	if m == iocost.On || m == iocost.Off {
		return m.String()
	}
	return `"` + m.String() + `"`
}

// orderedFilesystems describes the staging paths whose journal orders
// data (none without staging disks); the stager reads the same table and
// counts an unreadable one as ordering nothing.
func (d Doctor) orderedFilesystems(disks []string) ([]string, error) {
	if len(disks) == 0 || d.Disks == nil {
		return nil, nil
	}
	fss, err := d.Disks.Filesystems(d.In.StagingPaths)
	var ordered []string
	for _, f := range fss {
		if f.OrdersData() {
			ordered = append(ordered, f.String())
		}
	}
	return ordered, err
}

func orNone(disks []string) string {
	if len(disks) == 0 {
		return "any staging disk (none found)"
	}
	return strings.Join(disks, ", ")
}

// SysfsIOControl reads the root cgroup under Root.
type SysfsIOControl struct{ Root string }

func (s SysfsIOControl) controller() iocost.Controller {
	return iocost.Controller{CgroupRoot: Rooted(s.Root, "/sys/fs/cgroup"), SysRoot: Rooted(s.Root, "/sys")}
}

func (s SysfsIOControl) IOCost() error { return s.controller().Available() }

// Learned reads the stager's learned models, as the stager finds the disk
// in them (iocost.Controller.DiskID).
func (s SysfsIOControl) Learned(disk, stateDir string) (iocost.Learned, bool, error) {
	c := s.controller()
	c.LearnedFile = filepath.Join(stateDir, "iocost-learned.json")
	set, err := c.LoadLearned()
	if err != nil {
		return iocost.Learned{}, false, err
	}
	id, err := c.DiskID(disk)
	if err != nil {
		return iocost.Learned{}, false, err
	}
	l, ok := set.Find(id)
	return l, ok, nil
}

// IOLatency looks in system.slice: io.latency exists on non-root cgroups
// only, and only where the io controller is enabled (io.weight there).
func (s SysfsIOControl) IOLatency() (bool, error) {
	dir := filepath.Join(Rooted(s.Root, "/sys/fs/cgroup"), "system.slice")
	if _, err := os.Stat(filepath.Join(dir, "io.latency")); err == nil {
		return true, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "io.weight")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("the io controller is not enabled in %s", dir)
		}
		return false, err
	}
	return false, nil
}

func (s SysfsIOControl) InForce(disk string) (string, string, error) {
	return s.controller().InForce(disk)
}

package iocost

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/state"
)

// Controller writes the root cgroup's io.cost files and keeps the record
// of what was in force before, like agent/iosched's scheduler record.
type Controller struct {
	// CgroupRoot is the cgroup2 mount ("/sys/fs/cgroup"); SysRoot is
	// sysfs ("/sys"), where a disk's "MAJ:MIN" is read.
	CgroupRoot string
	SysRoot    string
	// StateFile records the originals before anything is changed.
	StateFile string
	// LearnedFile keeps the models learned on the disks (learn.go); ""
	// learns nothing across windows.
	LearnedFile string
	// BootIDPath is where the current boot's ID is read ("": the
	// kernel's). A record of an earlier boot is dropped: the reboot reset
	// the controller.
	BootIDPath string
	Log        *slog.Logger
}

// DiskRecord is one disk's lines before the window ("": none).
type DiskRecord struct {
	Disk  string `json:"disk"`
	Dev   string `json:"dev"`
	QoS   string `json:"qos,omitempty"`
	Model string `json:"model,omitempty"`
}

// Record is what the state file holds.
type Record struct {
	BootID string       `json:"boot_id,omitempty"`
	Disks  []DiskRecord `json:"disks"`
}

// ErrUnavailable: the kernel has no iocost (built without
// CONFIG_BLK_CGROUP_IOCOST, or cgroup v1).
var ErrUnavailable = errors.New("the kernel has no iocost (no io.cost.qos in the root cgroup)")

func (c Controller) cgroup() string {
	if c.CgroupRoot == "" {
		return "/sys/fs/cgroup"
	}
	return c.CgroupRoot
}

func (c Controller) sys() string {
	if c.SysRoot == "" {
		return "/sys"
	}
	return c.SysRoot
}

func (c Controller) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

func (c Controller) qosFile() string   { return filepath.Join(c.cgroup(), "io.cost.qos") }
func (c Controller) modelFile() string { return filepath.Join(c.cgroup(), "io.cost.model") }

// Available is nil when the kernel has iocost, else why not.
func (c Controller) Available() error {
	if _, err := os.Stat(c.qosFile()); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ErrUnavailable
		}
		return fmt.Errorf("checking for iocost: %w", err)
	}
	return nil
}

// Dev is a disk's "MAJ:MIN".
func (c Controller) Dev(disk string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.sys(), "block", disk, "dev"))
	if err != nil {
		return "", fmt.Errorf("reading the device number of %s: %w", disk, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// InForce is the disk's io.cost.qos and io.cost.model lines now ("": none).
func (c Controller) InForce(disk string) (qos, model string, err error) {
	dev, err := c.Dev(disk)
	if err != nil {
		return "", "", err
	}
	q, err := os.ReadFile(c.qosFile())
	if err != nil {
		return "", "", fmt.Errorf("reading io.cost.qos: %w", err)
	}
	m, err := os.ReadFile(c.modelFile())
	if err != nil {
		return "", "", fmt.Errorf("reading io.cost.model: %w", err)
	}
	return Lines(string(q))[dev], Lines(string(m))[dev], nil
}

// DiskPlan is what a window puts on one disk.
type DiskPlan struct {
	Disk string
	QoS  QoS
	// Model is written when set; nil keeps the model in force.
	Model  *Model
	Source Source
}

// Apply sets each plan's model and QoS, recording the lines in force
// first. Lines recorded by an earlier run that crashed are kept: they are
// the true originals.
func (c Controller) Apply(plans []DiskPlan) error {
	if err := c.Available(); err != nil {
		return err
	}
	for _, p := range plans {
		if err := p.QoS.Validate(); err != nil {
			return fmt.Errorf("iocost QoS for %s: %w", p.Disk, err)
		}
	}
	rec, err := c.loadCurrent()
	if err != nil {
		return err
	}
	recorded := map[string]bool{}
	for _, d := range rec.Disks {
		recorded[d.Disk] = true
	}
	devs := make([]string, len(plans))
	for i, p := range plans {
		if devs[i], err = c.Dev(p.Disk); err != nil {
			return err
		}
		if recorded[p.Disk] {
			continue
		}
		q, m, err := c.InForce(p.Disk)
		if err != nil {
			return err
		}
		rec.Disks = append(rec.Disks, DiskRecord{Disk: p.Disk, Dev: devs[i], QoS: q, Model: m})
	}
	if err := c.save(rec); err != nil {
		return err
	}
	for i, p := range plans {
		source := "the model in force (the kernel's auto model unless set outside the agent)"
		if p.Model != nil {
			if err := c.write(c.modelFile(), p.Model.Line(devs[i])); err != nil {
				return err
			}
			source = p.Source.String()
		}
		_, model, err := c.InForce(p.Disk)
		if err != nil {
			return err
		}
		if err := c.write(c.qosFile(), p.QoS.Line(devs[i])); err != nil {
			return err
		}
		c.log().Info("iocost on for the staging window", "disk", p.Disk, "dev", devs[i], "model_source", source,
			"io_cost_model", model, "io_cost_qos", p.QoS.Line(devs[i]))
	}
	return nil
}

// Restore writes back what the record holds and removes it; no record is
// nothing to do. Every disk is tried; the record stays when one failed. A
// disk that is gone is skipped with a warning (nothing to restore on it).
func (c Controller) Restore() error {
	rec, err := c.loadCurrent()
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range rec.Disks {
		if _, err := os.Stat(filepath.Join(c.sys(), "block", d.Disk)); errors.Is(err, fs.ErrNotExist) {
			c.log().Warn("not restoring iocost on a disk that is gone", "disk", d.Disk, "io_cost_qos", d.QoS, "io_cost_model", d.Model)
			continue
		}
		// QoS first: the controller goes off before its model changes.
		q, err := RestoreQoSLine(d.Dev, d.QoS)
		if err == nil {
			err = c.write(c.qosFile(), q)
		}
		errs = append(errs, err)
		m, err := RestoreModelLine(d.Dev, d.Model)
		if err == nil {
			err = c.write(c.modelFile(), m)
		}
		errs = append(errs, err)
		c.log().Info("iocost restored after the staging window", "disk", d.Disk, "io_cost_qos", q, "io_cost_model", m)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restoring iocost: %w", err)
	}
	if c.StateFile == "" {
		return nil
	}
	if err := atomicfile.Remove(c.StateFile); err != nil {
		return fmt.Errorf("removing the iocost record: %w", err)
	}
	return nil
}

// write writes one line (the kernel takes one device per write).
func (c Controller) write(file, line string) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", line, file, err)
	}
	return nil
}

// loadCurrent reads the record, dropping one of an earlier boot.
func (c Controller) loadCurrent() (Record, error) {
	var rec Record
	if c.StateFile == "" {
		return rec, nil
	}
	if _, err := atomicfile.ReadJSON(c.StateFile, &rec); err != nil {
		return Record{}, fmt.Errorf("reading the iocost record: %w", err)
	}
	p := c.BootIDPath
	if p == "" {
		p = state.BootIDPath
	}
	boot, err := state.ReadBootID(p)
	if err != nil {
		c.log().Warn("iocost record kept without a boot ID to check it against", "err", err)
		return rec, nil
	}
	if rec.BootID != "" && rec.BootID != boot && len(rec.Disks) > 0 {
		c.log().Warn("dropping the iocost settings recorded in an earlier boot; the kernel reset them",
			"state_file", c.StateFile, "recorded_boot_id", rec.BootID, "disks", len(rec.Disks))
		rec.Disks = nil
	}
	rec.BootID = boot
	return rec, nil
}

func (c Controller) save(rec Record) error {
	if c.StateFile == "" {
		return errors.New("saving the iocost record: no state file configured")
	}
	if err := atomicfile.WriteJSON(c.StateFile, rec); err != nil {
		return fmt.Errorf("saving the iocost record: %w", err)
	}
	return nil
}

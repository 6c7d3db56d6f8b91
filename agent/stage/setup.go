package stage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/update-agent/update-agent/agent/systemd"
)

// setup opens the window: the disks' scheduler and queues, the policy on
// the daemon, etcd's latency target, per-object fsync. It is its own
// phase, each step logged with its duration, because opening the window
// is where etcd stalled before a byte was staged (the demo's 300-700 ms
// puts around the scheduler switch and the daemon restart). It returns the
// policy the staging unit gets.
//
// cost non-nil turns iocost on; memoryHigh is the window's page cache
// allowance (Stager.choosePacing).
func (s *Stager) setup(ctx context.Context, j *journal, disks []string, mode writeRate, cost *iocostWindow, memoryHigh uint64) (systemd.Policy, error) {
	policy := s.o.Policy
	policy.MemoryHigh = memoryHigh
	step := func(name string, f func() error) error {
		t := time.Now()
		err := f()
		s.log.Info("staging setup step", "step", name, "seconds", round3(time.Since(t).Seconds()), "ok", err == nil)
		return err
	}
	if s.o.Scheduler != "" || s.o.NrRequests > 0 || s.o.MaxSectorsKB > 0 {
		if len(disks) == 0 {
			return policy, errors.New("a scheduler or queue setting is configured but no paths to find the disks")
		}
		j.Scheduler = true
		if err := s.saveJournal(j); err != nil {
			return policy, err
		}
		// iosched writes the scheduler only where it differs: a disk
		// already on it is not drained and frozen again.
		if err := step("scheduler", func() error { return s.sched.Apply(ctx, disks) }); err != nil {
			return policy, err
		}
	}
	if cost != nil {
		if err := step("iocost", func() error { return s.applyIOCost(ctx, j, cost) }); err != nil {
			return policy, err
		}
		// The weight the journal's line says (iocostWeights).
		policy.IOWeight = s.iocostWeights(cost).Stager
	}
	var rate uint64
	switch mode {
	case rateFixed:
		rate = s.o.WriteBandwidthMax
	case rateLoop:
		rate = s.o.WriteRate.WithDefaults().Start
	case rateStart:
		rate = s.o.WriteRate.WithDefaults().Start
		s.log.Warn("write rate \"auto\" without the latency guard: staying at the start rate", "write_rate_mbps", float64(rate)/1e6)
	case rateNone:
		if s.o.WriteRateAuto && cost != nil {
			s.log.Info("write rate \"auto\" under iocost: no cap; the kernel paces staging from the disk's latency")
		} else if s.o.WriteRateAuto {
			s.log.Info("write rate \"auto\" on a journal that orders data: no cap (an fsync's commit would wait for the capped write-back); the memory bound and the guard pace staging")
		}
	}
	if rate > 0 {
		iops := uint64(0)
		if mode != rateFixed {
			iops = s.o.WriteRate.IOPS(rate)
		}
		for _, d := range disks {
			policy.IOWriteBandwidthMax = append(policy.IOWriteBandwidthMax, systemd.DeviceValue{Path: "/dev/" + d, Value: rate})
			if iops > 0 {
				policy.IOWriteIOPSMax = append(policy.IOWriteIOPSMax, systemd.DeviceValue{Path: "/dev/" + d, Value: iops})
			}
		}
	}
	if s.o.DaemonUnit != "" {
		if err := step("daemon policy", func() error { return s.applyDaemonPolicy(ctx, j, policy) }); err != nil {
			return policy, err
		}
		if mode == rateLoop && len(disks) > 0 && !s.journaled(j, s.o.DaemonUnit, "IOWriteBandwidthMax") {
			// The daemon was not running: its next start takes the drop-in's
			// rate, and the controller's changes must be undone too.
			props := []sd.Property{systemd.DeviceProperty("IOWriteBandwidthMax", policy.IOWriteBandwidthMax)}
			if len(policy.IOWriteIOPSMax) > 0 {
				props = append(props, systemd.DeviceProperty("IOWriteIOPSMax", policy.IOWriteIOPSMax))
			}
			if err := s.setRuntime(ctx, j, s.o.DaemonUnit, props...); err != nil {
				s.log.Warn("the daemon's write rate will not follow the controller", "systemd_unit", s.o.DaemonUnit, "err", err)
			}
		}
	}
	if s.o.EtcdUnit != "" && s.o.EtcdLatencyTarget > 0 && len(disks) > 0 {
		var tgt []systemd.DeviceValue
		for _, d := range disks {
			tgt = append(tgt, systemd.DeviceValue{Path: "/dev/" + d, Value: uint64(s.o.EtcdLatencyTarget / time.Microsecond)})
		}
		if err := step("etcd latency target", func() error {
			return s.setRuntime(ctx, j, s.o.EtcdUnit, systemd.DeviceProperty("IODeviceLatencyTargetUSec", tgt))
		}); err != nil {
			// A knob of its own: staging does not depend on it.
			s.log.Warn("staging without an I/O latency target on etcd's unit", "systemd_unit", s.o.EtcdUnit, "err", err)
		}
	}
	if s.o.PerObjectFsync {
		if err := step("per-object fsync", func() error { return s.setFsync(ctx, j) }); err != nil {
			return policy, err
		}
	}
	return policy, nil
}

// journaled says whether the journal records the unit's property, i.e.
// whether undo sets it back.
func (s *Stager) journaled(j *journal, unit, name string) bool {
	for _, rc := range j.Runtime {
		if rc.Unit != unit {
			continue
		}
		for _, p := range rc.Old {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// rateWriter is the rate controller's output: the write cap on the
// staging disks for the staging unit and the daemon. The daemon's is set
// through systemd (its old value is in the journal since setup, so undo
// sets it back). The staging unit's goes straight into its cgroup's io.max:
// systemd keeps runtime properties in control files that outlive a
// transient unit and would apply to the next staging unit of that name.
// What does not change within the window, the disks' device numbers and
// the staging unit's cgroup, is looked up once: the rate changes up to
// once a second, and the lookups were a D-Bus call and an open a disk
// each time.
type rateWriter struct {
	s     *Stager
	disks []string
	devs  []string // each disk's "MAJ:MIN", "" until read
	ioMax string   // the staging unit's io.max, "" until known
	// foreign: a window around somebody else's transaction, without a
	// staging unit of its own to pace.
	foreign bool
}

func (w *rateWriter) set(ctx context.Context, rate uint64) error {
	var errs []error
	if w.foreign {
		// No staging unit: its name may be a leftover of an earlier staging.
	} else if err := w.stagingUnit(ctx, rate); err != nil {
		errs = append(errs, err)
	}
	if d := w.s.o.DaemonUnit; d != "" {
		vals := make([]systemd.DeviceValue, len(w.disks))
		var iopsVals []systemd.DeviceValue
		for i, disk := range w.disks {
			vals[i] = systemd.DeviceValue{Path: "/dev/" + disk, Value: rate}
			if iops := w.s.o.WriteRate.IOPS(rate); iops > 0 {
				iopsVals = append(iopsVals, systemd.DeviceValue{Path: "/dev/" + disk, Value: iops})
			}
		}
		props := []sd.Property{systemd.DeviceProperty("IOWriteBandwidthMax", vals)}
		if len(iopsVals) > 0 {
			props = append(props, systemd.DeviceProperty("IOWriteIOPSMax", iopsVals))
		}
		if err := w.s.d.Systemd.SetRuntime(ctx, d, props...); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// stagingUnit writes the io.max lines, one write each (the kernel takes
// one setting per write); a disk whose number cannot be read is skipped
// with its error.
func (w *rateWriter) stagingUnit(ctx context.Context, rate uint64) error {
	unit := w.s.o.StagingUnit
	if w.ioMax == "" {
		// One property, not the whole status: in the guest the full read
		// was 5 % of stage-once's CPU.
		cg, err := w.s.d.Systemd.ControlGroup(ctx, unit)
		if err != nil {
			return err
		}
		if cg == "" {
			return nil // not running (any more): nothing to pace
		}
		w.ioMax = filepath.Join(cgroupDir(w.s.o.SysRoot, cg), "io.max")
	}
	var errs []error
	for i, d := range w.disks {
		if w.devs == nil {
			w.devs = make([]string, len(w.disks))
		}
		if w.devs[i] == "" {
			root := w.s.o.SysRoot
			if root == "" {
				root = "/sys"
			}
			b, err := os.ReadFile(filepath.Join(root, "block", d, "dev"))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			w.devs[i] = strings.TrimSpace(string(b))
		}
		line := fmt.Sprintf("%s wbps=%d", w.devs[i], rate)
		if iops := w.s.o.WriteRate.IOPS(rate); iops > 0 {
			line += fmt.Sprintf(" wiops=%d", iops)
		}
		if err := os.WriteFile(w.ioMax, []byte(line), 0); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				w.ioMax = "" // the unit stopped: nothing to pace
				return errors.Join(errs...)
			}
			return errors.Join(append(errs, fmt.Errorf("%s: writing %q: %w", unit, line, err))...)
		}
	}
	return errors.Join(errs...)
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

package stage

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/systemd"
)

// modelBrake is what the guard's model brake needs from the window: how
// to scale the models, and where iocost's books are.
type modelBrake struct {
	scale func(context.Context, float64) error
	books *guard.CostInputs
}

// costBooks says where the brake reads what the other tenants use
// (guard.CostInputs): the cgroup2 root's io.stat, the stager's (the
// staging unit's, in system.slice where systemd puts a transient service,
// and the daemon's), by the window's iocost disks. nil when no disk's
// device number reads: the brake then judges by etcd alone.
func (s *Stager) costBooks(ctx context.Context, disks []string, foreign bool) *guard.CostInputs {
	devs := map[string]string{}
	for _, d := range disks {
		dev, err := s.iocost.Dev(d)
		if err != nil {
			s.log.Warn("iocost: the model brake does not see the other tenants' share of this disk", "disk", d, "err", err)
			continue
		}
		devs[dev] = d
	}
	if len(devs) == 0 {
		return nil
	}
	var own []string
	if !foreign {
		own = append(own, filepath.Join(cgroupDir(s.o.SysRoot, systemd.SliceCgroup("system.slice", s.o.StagingUnit)), "io.stat"))
	}
	if s.o.DaemonUnit != "" {
		cg := systemd.SliceCgroup("system.slice", s.o.DaemonUnit)
		if c, err := s.d.Systemd.ControlGroup(ctx, s.o.DaemonUnit); err == nil && c != "" {
			cg = c
		}
		own = append(own, filepath.Join(cgroupDir(s.o.SysRoot, cg), "io.stat"))
	}
	return &guard.CostInputs{Root: filepath.Join(cgroupDir(s.o.SysRoot, "/"), "io.stat"), Own: own, Devs: devs}
}

// scaleIOCost puts each of the window's disks on its model as the window
// started times scale (the guard's model brake, guard.StepModel). On a
// cut the QoS's vrate bound comes down to where the kernel has vrate now,
// and it never goes back up within the window: the kernel raises vrate on
// the device's completion latency, which met the QoS while the model
// overstated the disk, and would undo the cut (measured: a raise of the
// bound with the model took the effective rate up 1.56x a step, vrate
// from 276 to 674 % in one window). A raise is the model's alone. The
// controller keeps the lines from before the window: the restore undoes
// every scaling too.
func (s *Stager) scaleIOCost(w *iocostWindow, scale float64) error {
	if w == nil || len(w.plans) == 0 {
		return nil
	}
	if w.started == nil {
		w.scale = 1
		w.started = make([]iocost.Model, len(w.plans))
		for i, p := range w.plans {
			if p.Model != nil {
				w.started[i] = *p.Model
			}
		}
	}
	for i := range w.plans {
		p := &w.plans[i]
		if p.Model == nil {
			continue // the kernel's model in force: not the agent's to scale
		}
		m := w.started[i].Scale(scale * 100)
		p.Model = &m
		if scale < w.scale {
			if v, err := s.iocost.Vrate(p.Disk); err == nil {
				p.QoS.Max = max(p.QoS.Min, min(p.QoS.Max, v))
			} else {
				s.log.Warn("iocost: vrate unread, its bound left as it is", "disk", p.Disk, "err", err)
			}
		}
	}
	w.scale = scale
	if err := s.iocost.Apply(w.plans); err != nil {
		return fmt.Errorf("scaling the iocost models to %.3f: %w", scale, err)
	}
	return nil
}

// modelScale is the scale the brake left the models at (1: never cut).
func (w *iocostWindow) modelScale() float64 {
	if w.started == nil {
		return 1
	}
	return w.scale
}

package stage

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/systemd"
)

// IOCostOptions turn on the kernel's proportional I/O controller on the
// staging disks for the window (agent/iocost).
type IOCostOptions struct {
	// Mode is staging.iocost: which disks get it (iocost.Disks); under
	// iocost.WithModel the others are left to the kernel as they are.
	Mode iocost.Mode
	// Models are operator-given cost models by disk name.
	Models map[string]iocost.Model
	// Targets derive the QoS; BaselineP99 is filled from the guard's
	// baseline when there is one.
	Targets iocost.Targets
	// IOWeight replaces Policy.IOWeight on the stager and the daemon;
	// EtcdIOWeight goes on EtcdUnit (0: "auto", iocost.EtcdWeight).
	IOWeight, EtcdIOWeight uint64
}

// IOCost is the controller's edge (iocost.Controller).
type IOCost interface {
	Available() error
	Apply(plans []iocost.DiskPlan) error
	Restore() error
	// DiskID, Vrate and the learned set are for learning the model of a
	// disk nobody gave one for (agent/iocost/learn.go).
	DiskID(disk string) (string, error)
	Vrate(disk string) (float64, error)
	// Dev is a disk's "major:minor" (the model brake's books).
	Dev(disk string) (string, error)
	LoadLearned() (iocost.LearnedSet, error)
	SaveLearned(iocost.LearnedSet) error
}

func (o Options) iocostController() iocost.Controller {
	sys := o.SysRoot
	if sys == "" {
		sys = "/sys"
	}
	return iocost.Controller{CgroupRoot: filepath.Join(sys, "fs/cgroup"), SysRoot: o.SysRoot,
		StateFile: filepath.Join(o.StateDir, "iocost.json"), LearnedFile: filepath.Join(o.StateDir, "iocost-learned.json"), BootIDPath: o.BootIDPath, Log: o.Log}
}

// iocostDisks are the window's disks iocost goes on: as the mode decides
// for the journal (iocost.Disks, as doctor reports it), and a kernel that
// has it. None: the write rate loop paces staging, and the journal says
// why (unless no model was given at all, the default's quiet case).
func (s *Stager) iocostDisks(disks []string, ordersData bool) []string {
	mode := iocost.Effective(s.o.IOCost.Mode, ordersData)
	on := iocost.Disks(mode, disks, s.o.IOCost.Models, ordersData)
	if mode == iocost.Off || len(disks) == 0 {
		return nil
	}
	if mode == iocost.WithModel {
		var without []string
		for _, d := range disks {
			if !slices.Contains(on, d) {
				without = append(without, d)
			}
		}
		switch {
		case len(s.o.IOCost.Models) == 0:
			return nil
		case len(on) == 0:
			s.log.Warn("staging.iocost_models has no model for the staging disks: the write rate loop paces staging instead",
				"disks", disks)
			return nil
		case len(without) > 0:
			s.log.Info("iocost only on the disks with a model in staging.iocost_models", "iocost_disks", on, "disks_without_model", without)
		}
	}
	if len(on) == 0 {
		return nil
	}
	if err := s.iocost.Available(); err != nil {
		s.log.Warn("iocost unavailable: the write rate loop paces staging instead", "err", err)
		return nil
	}
	return on
}

// iocostWindow is iocost for one window: its disks, and the guard's
// baseline its QoS is derived from (nil: none known); plans are what
// applyIOCost put on each disk, with the disk's ID where it learns.
type iocostWindow struct {
	disks []string
	base  guard.Baseline
	plans []iocost.DiskPlan
	ids   map[string]string
	// foreign: around somebody else's transaction, no staging unit.
	foreign bool
	// ordersData: the staging paths' journal orders data (etcd's weight
	// follows it, iocost.EtcdWeight).
	ordersData bool
	// started and scale are the model brake's (scaleIOCost): the plans'
	// models as applied, and the scale the plans are at now. Only the
	// guard's goroutine writes them while it runs.
	started []iocost.Model
	scale   float64
}

// walFsyncP99 is etcd's WAL fsync p99 in the guard's baseline, 0 when
// the baseline has none.
func walFsyncP99(b guard.Baseline) time.Duration {
	for k, st := range b {
		if guard.SignalName(k) == guard.SignalWALFsync {
			return st.P99
		}
	}
	return 0
}

// applyIOCost turns iocost on (recorded in the journal first, the
// controller keeping its own record of the lines it replaces) and gives
// etcd's unit its high weight. The stager's and daemon's low weight is
// in their policy.
func (s *Stager) applyIOCost(ctx context.Context, j *journal, w *iocostWindow) error {
	t := s.o.IOCost.Targets
	t.BaselineP99 = walFsyncP99(w.base)
	q, why := iocost.DeriveQoS(t)
	s.log.Info("iocost QoS for the staging window", "latency_target_us", q.WLat, "latency_source", why,
		"percentile", q.WPct, "vrate_min", q.Min, "vrate_max", q.Max)
	w.plans, w.ids = s.iocostPlans(w.disks, q)
	j.IOCost = true
	if err := s.saveJournal(j); err != nil {
		return err
	}
	if err := s.iocost.Apply(w.plans); err != nil {
		return err
	}
	if err := s.rebaseIOCost(w); err != nil {
		return err
	}
	// iocost shares a disk by weight among siblings: say who is weighted,
	// and that every other cgroup keeps its own share (doctor says the
	// same from the same decision).
	ww := s.iocostWeights(w)
	s.log.Info("iocost weights for the staging window", ww.LogAttrs(s.o.EtcdUnit)...)
	if ww.EtcdRaised() {
		if err := s.setRuntime(ctx, j, ww.EtcdUnit, systemd.Policy{IOWeight: ww.Etcd}.CgroupProperties()...); err != nil {
			// The controller still favours etcd's latency over the
			// stager's through the QoS: not a reason to stop.
			s.log.Warn("staging without a high I/O weight on etcd's unit", "systemd_unit", s.o.EtcdUnit, "err", err)
		}
	}
	return nil
}

// iocostWeights is who the window weights under iocost (a foreign window
// has no staging unit).
func (s *Stager) iocostWeights(w *iocostWindow) iocost.Weights {
	unit := s.o.StagingUnit
	if w.foreign {
		unit = ""
	}
	etcd, _ := iocost.EtcdWeight(s.o.IOCost.EtcdIOWeight, w.ordersData)
	return iocost.WindowWeights(true, unit, s.o.DaemonUnit, s.o.Policy.IOWeight, s.o.IOCost.IOWeight, s.o.EtcdUnit, etcd)
}

// rebaseIOCost starts the window at its plans' rates whatever vrate the
// kernel kept from an earlier window in this boot (iocost.Rebase): read
// once iocost is on (io.stat prints it only then), the plans rewritten
// over it. Unread, the window runs as applied.
func (s *Stager) rebaseIOCost(w *iocostWindow) error {
	changed := false
	for i, p := range w.plans {
		if p.Model == nil {
			continue
		}
		v, err := s.iocost.Vrate(p.Disk)
		if err != nil {
			s.log.Warn("iocost: vrate unread at the window's start; an earlier window's may scale this one", "disk", p.Disk, "err", err)
			continue
		}
		r := iocost.Rebase(p, v)
		if r.Model == p.Model {
			continue
		}
		s.log.Info("iocost: the kernel kept an earlier window's vrate; the model rebased on it", "disk", p.Disk,
			"carried_vrate_pct", v, "model", p.Disk+" "+r.Model.Params(), "vrate_min", round3(r.QoS.Min), "vrate_max", round3(r.QoS.Max))
		w.plans[i], changed = r, true
	}
	if !changed {
		return nil
	}
	if err := s.iocost.Apply(w.plans); err != nil {
		return fmt.Errorf("rebasing the iocost models on the kernel's vrate: %w", err)
	}
	return nil
}

package stage

import (
	"context"
	"errors"
	"time"

	"github.com/update-agent/update-agent/agent/iocost"
)

// iocostPlans is each disk's model for the window: the operator's, else
// the one learned on the disk, else the seed, which may climb to
// iocost.SeedVrateMax. A disk without an ID (sysfs unreadable) runs the
// seed and learns nothing.
// tops are each disk's vrate bound before the etcd feedback's ceiling.
func (s *Stager) iocostPlans(disks []string, q iocost.QoS) (plans []iocost.DiskPlan, ids map[string]string, tops map[string]float64) {
	set, err := s.iocost.LoadLearned()
	if err != nil {
		s.log.Warn("iocost: starting from the seed model", "err", err)
	}
	ids, tops = map[string]string{}, map[string]float64{}
	for _, d := range disks {
		var given *iocost.Model
		if m, ok := s.o.IOCost.Models[d]; ok {
			given = &m
		}
		id := ""
		if given == nil {
			if id, err = s.iocost.DiskID(d); err != nil {
				s.log.Warn("iocost: this disk's model is not kept across windows", "disk", d, "err", err)
			}
		}
		m, src, err := iocost.Plan(given, set, id)
		if err != nil {
			s.log.Warn("iocost: starting from the seed model", "disk", d, "err", err)
		}
		dq := q
		if src == iocost.Seeded {
			dq.Max = max(dq.Max, iocost.SeedVrateMax)
		}
		tops[d] = dq.Max
		if s.o.IOCost.EtcdFeedback && s.o.Guard.Enabled {
			// The loop's first ceiling: its start rate on this model.
			dq.Max = vrateCeiling(s.o.WriteRate.WithDefaults().Start, m, dq.Min, dq.Max)
		}
		if id != "" {
			ids[d] = id
		}
		plans = append(plans, iocost.DiskPlan{Disk: d, QoS: dq, Model: &m, Source: src})
	}
	return plans, ids, tops
}

// learnIOCost keeps, for each disk the window learns on, the model it
// ran times the vrate the kernel ended at, and says so in a line an
// operator can pin in staging.iocost_models.
func (s *Stager) learnIOCost(w *iocostWindow, ran time.Duration) {
	if w == nil {
		return
	}
	set, err := s.iocost.LoadLearned()
	if err != nil {
		s.log.Warn("iocost: not learning from this window", "err", err)
		return
	}
	changed := false
	for _, p := range w.plans {
		id := w.ids[p.Disk]
		if !p.Source.Learns() || id == "" || p.Model == nil {
			continue
		}
		v, err := s.iocost.Vrate(p.Disk)
		if err != nil {
			s.log.Warn("iocost: not learning from this window", "disk", p.Disk, "err", err)
			continue
		}
		m, ok := iocost.Learn(*p.Model, v, ran)
		if !ok {
			s.log.Info("iocost: window too short to learn the disk from", "disk", p.Disk,
				"window_seconds", ran.Seconds(), "min_seconds", iocost.MinLearnWindow.Seconds())
			continue
		}
		prev, _ := set.Find(id)
		set.Put(iocost.Learned{ID: id, Disk: p.Disk, Model: m.Params(), Vrate: v, Windows: prev.Windows + 1, At: time.Now().UTC()})
		changed = true
		s.log.Info("iocost model learned", "disk", p.Disk, "disk_id", id, "from", p.Source.String(),
			"vrate_pct", v, "windows", prev.Windows+1, "model", p.Disk+" "+m.Params())
	}
	if changed {
		if err := s.iocost.SaveLearned(set); err != nil {
			s.log.Warn("iocost: the learned model is lost", "err", err)
		}
	}
}

// vrateCeiling is the vrate (percent, io.cost.qos max) at which model m
// writes rate bytes/s, within lo..hi: the write rate loop's rate as a
// ceiling on the kernel's scaling of the disk's model.
func vrateCeiling(rate uint64, m iocost.Model, lo, hi float64) float64 {
	if m.WBps == 0 {
		return hi
	}
	pct := float64(rate) / float64(m.WBps) * 100
	return min(max(pct, lo), hi)
}

// ceilingWriter is the guard's rate setter under iocost with etcd
// feedback: each disk's vrate ceiling follows the loop's rate, between the
// window's vrate bounds for the disk (iocostWindow.tops).
type ceilingWriter struct {
	s *Stager
	w *window
}

func (c *ceilingWriter) set(_ context.Context, rate uint64) error {
	if c.w.cost == nil {
		return nil
	}
	var errs []error
	for _, p := range c.w.cost.plans {
		if p.Model == nil {
			continue
		}
		q := p.QoS
		q.Max = vrateCeiling(rate, *p.Model, q.Min, c.w.cost.tops[p.Disk])
		errs = append(errs, c.s.iocost.SetQoS(p.Disk, q))
	}
	return errors.Join(errs...)
}

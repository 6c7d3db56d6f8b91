package stage

import (
	"time"

	"github.com/update-agent/update-agent/agent/iocost"
)

// iocostPlans is each disk's model for the window: the operator's, else
// the one learned on the disk, else the seed, all within the same vrate
// bounds (the QoS decides how far a wrong model is scaled). A disk
// without an ID (sysfs unreadable) runs the seed and learns nothing.
func (s *Stager) iocostPlans(disks []string, q iocost.QoS) (plans []iocost.DiskPlan, ids map[string]string) {
	set, err := s.iocost.LoadLearned()
	if err != nil {
		s.log.Warn("iocost: starting from the seed model", "err", err)
	}
	ids = map[string]string{}
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
		if id != "" {
			ids[d] = id
		}
		plans = append(plans, iocost.DiskPlan{Disk: d, QoS: q, Model: &m, Source: src})
	}
	return plans, ids
}

// learnIOCost keeps, for each disk the window learns on, the model it
// ran (as the brake left it) times the vrate the kernel ended at, and
// says so in a line an operator can pin in staging.iocost_models.
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
		if p.Model == nil {
			continue
		}
		v, err := s.iocost.Vrate(p.Disk)
		if err != nil {
			s.log.Warn("iocost: the window's end vrate unread; not learning from it", "disk", p.Disk, "err", err)
			continue
		}
		// Every source says where the kernel and the brake ended: a
		// given model far from the disk shows here first.
		a := []any{"disk", p.Disk, "model_source", p.Source.Short(), "vrate_pct", v,
			"model_scale", round3(w.modelScale()), "disk_at", p.Disk + " " + p.Model.Scale(v).Params()}
		s.log.Info("iocost at the window's end", a...)
		id := w.ids[p.Disk]
		if !p.Source.Learns() || id == "" {
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

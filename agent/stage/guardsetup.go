package stage

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/systemd"
)

// prepareGuard returns the guard (nil: none) and its baseline, and what
// closes its inputs (kept files, the kept connection to etcd) once it is
// done. A foreign window has no staging unit: the brake freezes the daemon
// alone. brake, when not nil, is how the model brake scales iocost's
// models and reads its books (guard.ModelOptions, guard.CostInputs).
func (s *Stager) prepareGuard(ctx context.Context, disks []string, rateLoop, foreign bool, rep *Report, brake *modelBrake) (*guard.Guard, guard.Baseline, func()) {
	closeInputs := func() {}
	if !s.o.Guard.Enabled {
		return nil, nil, closeInputs
	}
	gopts := s.o.Guard.Options
	gopts.Units = nil
	if !foreign {
		gopts.Units = []string{s.o.StagingUnit}
	}
	if s.o.DaemonUnit != "" {
		gopts.Units = append(gopts.Units, s.o.DaemonUnit)
	}
	if gopts.Config.Deadline == 0 {
		gopts.Config.Deadline = s.o.Timeout * 3 / 4 // leave a quarter unpaced to finish
	}
	if gopts.Log == nil {
		gopts.Log = s.log
	}
	src := s.o.Guard.Source
	if src == nil {
		psi, cpuPSI, own := pressureFiles(ctx, s.d.Systemd, s.o.Guard, s.o.SysRoot, s.log)
		gopts.Config.StallOwn = own
		in := &guard.Inputs{MetricsURL: s.o.Guard.MetricsURL, TLS: s.o.Guard.MetricsTLS, MetricsEvery: s.o.Guard.metricsEvery(), SysRoot: s.o.SysRoot, Disks: disks,
			PressureFile: psi, CPUPressureFile: cpuPSI, Clock: gopts.Clock}
		if own && s.o.Guard.PressureUnit == "" && s.o.Guard.PressureCgroup != nil {
			in.FindPressureFiles = refindPressure(s.o.Guard.PressureCgroup, s.o.SysRoot, psi, s.log)
		}
		src, closeInputs = in, func() { _ = in.Close() }
	}
	if rateLoop && len(disks) > 0 {
		rw := &rateWriter{s: s, disks: disks, foreign: foreign}
		gopts.Rate = guard.RateOptions{Config: s.o.WriteRate, Set: rw.set, FreezeFactor: s.o.RateLoopFreezeFactor}
		s.log.Info("latency guard: the write rate paces staging; freezing is the emergency brake",
			"freeze_above_baseline_p99_x", gopts.BrakeFactor(), "rate_target_x", s.o.WriteRate.WithDefaults().Target)
	}
	if brake != nil && s.o.Guard.IOCostBrake {
		gopts.Model.Set = brake.scale
		if brake.books != nil {
			cs, closeSrc := guard.WithCost(src, brake.books), closeInputs
			src, closeInputs = cs, func() { closeSrc(); _ = cs.Close() }
		}
	}
	g, err := guard.New(gopts, src, s.d.Systemd)
	if err != nil {
		s.log.Warn("staging without the latency guard", "err", err)
		return nil, nil, closeInputs
	}
	if s.o.Baseline != nil && gopts.LearnFor >= 0 {
		rec := s.o.Baseline.Record()
		age := rec.Age(time.Now())
		minN := gopts.MinObservations
		if minN == 0 {
			minN = 20
		}
		b, stall := rec.Baseline(minN)
		usable := len(b) > 0 || stall >= 0
		switch d := foreignBaseline(foreign, usable, age <= s.o.BaselineMaxAge); d {
		case baselineRolling, baselineStale:
			rep.Baseline = fmt.Sprintf("rolling, %s old", age.Round(time.Second))
			if d == baselineStale {
				rep.Baseline = fmt.Sprintf("stale rolling, %s old", age.Round(time.Second))
				// The transaction already writes: what is learnt now is its
				// load, not normal; an old normal is closer to the truth.
				s.log.Info("no fresh rolling latency baseline: a foreign transaction's window adopts the stale one rather than learn from its writes",
					"age", age.Round(time.Second).String(), "max_age", s.o.BaselineMaxAge.String())
			}
			if base, err := g.Adopt(b, stall, rep.Baseline); err == nil {
				return g, base, closeInputs
			} else if foreign {
				s.log.Info("a foreign transaction's window runs without the latency guard: the rolling baseline is not usable", "err", err)
				rep.Baseline = "none: rolling baseline not usable"
				return nil, nil, closeInputs
			}
		case baselineNone:
			s.log.Info("no rolling latency baseline yet: a foreign transaction's window runs without the latency guard; learning now would take its writes for normal")
			rep.Baseline = "none: no rolling baseline yet"
			return nil, nil, closeInputs
		default:
			ageText := "none kept yet"
			if !rec.Updated.IsZero() {
				ageText = age.Round(time.Second).String()
			}
			s.log.Info("no fresh rolling latency baseline: learning it before changing anything",
				"age", ageText, "max_age", s.o.BaselineMaxAge.String())
		}
	}
	rep.Baseline = "learned before the window"
	base, err := g.Learn(ctx)
	if err != nil {
		s.log.Warn("staging without the latency guard", "err", err)
		return nil, nil, closeInputs
	}
	return g, base, closeInputs
}

// Where a window's latency baseline comes from, when a rolling one is kept.
const (
	baselineLearn   = iota // learn it now, before changing anything
	baselineRolling        // the fresh rolling baseline
	baselineStale          // the rolling baseline, stale
	baselineNone           // no guard
)

// foreignBaseline decides where the baseline comes from. The agent's own
// staging learns when the rolling baseline is not fresh: nothing writes
// yet. A foreign window never learns: the transaction already writes, so
// what would be learnt is its load (targets too loose) and the window
// would pace nothing meanwhile; a stale normal beats that, and without
// any the window keeps its policy, memory bound and iocost, unguarded.
func foreignBaseline(foreign, usable, fresh bool) int {
	switch {
	case usable && fresh:
		return baselineRolling
	case !foreign:
		return baselineLearn
	case usable:
		return baselineStale
	default:
		return baselineNone
	}
}

// metricsEvery is how often etcd's metrics are scraped while staging;
// unset, as guard.metrics_interval's default (3 s).
func (g GuardOptions) metricsEvery() time.Duration {
	every := g.MetricsEvery
	if every <= 0 {
		every = 3 * time.Second
	}
	return max(g.Interval, every)
}

// pressureFiles are the PSI files the guard watches: g.PressureFile as
// given, else etcd's cgroup's io.pressure and cpu.pressure (own: the
// stager's stalls do not count there), from its unit or found by
// PressureCgroup; none where neither finds it (said in the journal).
func pressureFiles(ctx context.Context, sys interface {
	Status(context.Context, string) (systemd.UnitStatus, error)
}, g GuardOptions, sysRoot string, log *slog.Logger) (psi, cpuPSI string, own bool) {
	cg := ""
	switch {
	case g.PressureFile != "":
		return g.PressureFile, "", false
	case g.PressureUnit != "":
		st, err := sys.Status(ctx, g.PressureUnit)
		if err != nil || st.ControlGroup == "" {
			log.Warn("not watching I/O pressure: no cgroup for the unit", "systemd_unit", g.PressureUnit, "err", err)
			return "", "", false
		}
		cg = st.ControlGroup
	case g.PressureCgroup != nil:
		var err error
		if cg, err = g.PressureCgroup(); err != nil {
			log.Warn("not watching I/O pressure: etcd's cgroup not found", "err", err)
			return "", "", false
		}
		log.Info("watching the pressure of etcd's cgroup", "cgroup", cg)
	default:
		return "", "", false
	}
	dir := cgroupDir(sysRoot, cg)
	return filepath.Join(dir, "io.pressure"), filepath.Join(dir, "cpu.pressure"), true
}

// refindPressure finds etcd's cgroup again for the guard's inputs (psi is
// the io.pressure watched now): a static pod's container restarted within
// the window has a new one. Each change and the first miss are logged.
func refindPressure(find func() (string, error), sysRoot, psi string, log *slog.Logger) func() (string, string, error) {
	cur, missed := filepath.Dir(psi), false
	return func() (string, string, error) {
		cg, err := find()
		if err != nil {
			if !missed {
				log.Warn("etcd's cgroup is gone and not found again; its pressure is not watched until it is", "err", err)
			}
			missed = true
			return "", "", err
		}
		missed = false
		dir := cgroupDir(sysRoot, cg)
		if dir != cur {
			log.Info("watching the pressure of etcd's new cgroup", "cgroup", cg)
			cur = dir
		}
		return filepath.Join(dir, "io.pressure"), filepath.Join(dir, "cpu.pressure"), nil
	}
}

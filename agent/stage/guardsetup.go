package stage

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
)

// prepareGuard returns the guard (nil: none) and its baseline, and what
// closes its inputs (kept files, the kept connection to etcd) once it is
// done.
func (s *Stager) prepareGuard(ctx context.Context, disks []string, rateLoop bool, rep *Report) (*guard.Guard, guard.Baseline, func()) {
	closeInputs := func() {}
	if !s.o.Guard.Enabled {
		return nil, nil, closeInputs
	}
	gopts := s.o.Guard.Options
	gopts.Units = []string{s.o.StagingUnit}
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
		psi, cpuPSI := s.o.Guard.PressureFile, ""
		if psi == "" && s.o.Guard.PressureUnit != "" {
			st, err := s.d.Systemd.Status(ctx, s.o.Guard.PressureUnit)
			if err != nil || st.ControlGroup == "" {
				s.log.Warn("not watching I/O pressure: no cgroup for the unit", "systemd_unit", s.o.Guard.PressureUnit, "err", err)
			} else {
				dir := cgroupDir(s.o.SysRoot, st.ControlGroup)
				psi, cpuPSI = filepath.Join(dir, "io.pressure"), filepath.Join(dir, "cpu.pressure")
				gopts.Config.StallOwn = true
			}
		}
		in := &guard.Inputs{MetricsURL: s.o.Guard.MetricsURL, TLS: s.o.Guard.MetricsTLS, MetricsEvery: s.o.Guard.metricsEvery(), SysRoot: s.o.SysRoot, Disks: disks,
			PressureFile: psi, CPUPressureFile: cpuPSI, Clock: gopts.Clock}
		src, closeInputs = in, func() { _ = in.Close() }
	}
	if rateLoop && len(disks) > 0 {
		rw := &rateWriter{s: s, disks: disks}
		gopts.Rate = guard.RateOptions{Config: s.o.WriteRate, Set: rw.set, FreezeFactor: s.o.RateLoopFreezeFactor}
		s.log.Info("latency guard: the write rate paces staging; freezing is the emergency brake",
			"freeze_above_baseline_p99_x", gopts.BrakeFactor(), "rate_target_x", s.o.WriteRate.WithDefaults().Target)
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
		if b, stall := rec.Baseline(minN); age <= s.o.BaselineMaxAge && (len(b) > 0 || stall >= 0) {
			rep.Baseline = fmt.Sprintf("rolling, %s old", age.Round(time.Second))
			if base, err := g.Adopt(b, stall, rep.Baseline); err == nil {
				return g, base, closeInputs
			}
		} else {
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

// metricsEvery is how often etcd's metrics are scraped while staging;
// unset, as guard.metrics_interval's default (3 s).
func (g GuardOptions) metricsEvery() time.Duration {
	every := g.MetricsEvery
	if every <= 0 {
		every = 3 * time.Second
	}
	return max(g.Interval, every)
}

package stage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Foreign is a transaction rpm-ostreed runs for somebody else (zincati, the
// MCO daemon, an admin's rpm-ostree): status --json's "transaction".
type Foreign struct {
	Method, Sender, Path string
}

// PaceForeign opens the staging window around t, a deployment-writing
// transaction the agent did not start, keeps it until ended is closed (the
// transaction is gone) or ctx ends, and undoes it. It starts no staging
// unit and never stops or cancels t: rpm-ostreed does the writing and is
// the one unit paced (its policy, iocost, the memory bound, the guard's
// brake). The undo journal records the window, so Recover restores a
// window whose process was killed. It fails with ErrBusy while this host
// stages (the agent's own staging is paced already).
func (s *Stager) PaceForeign(ctx context.Context, t Foreign, ended <-chan struct{}) (rep Report, err error) {
	start := time.Now()
	if s.o.DaemonUnit == "" {
		return rep, errors.New("pacing a foreign transaction: no daemon unit to pace")
	}
	unlock, err := s.lock()
	if err != nil {
		return rep, fmt.Errorf("pacing a foreign transaction: %w", err)
	}
	defer unlock()
	if err := s.recover(ctx); err != nil {
		return rep, fmt.Errorf("pacing a foreign transaction: undoing an earlier staging first: %w", err)
	}
	j := &journal{BootID: s.bootID(), Foreign: &foreignRecord{Method: t.Method, Sender: t.Sender, Path: t.Path, Found: start.UTC()}}
	if err := s.saveJournal(j); err != nil {
		return rep, err
	}
	s.log.Info("foreign rpm-ostree transaction found: opening the staging window around it",
		"method", t.Method, "sender", t.Sender, "path", t.Path, "systemd_unit", s.o.DaemonUnit)
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if uerr := s.undo(uctx, j); uerr != nil {
			s.log.Error("undoing the staging policy of a foreign transaction failed; the next start retries", "err", uerr)
			err = errors.Join(err, uerr)
		}
		rep.Duration = time.Since(start)
		s.log.Info("foreign transaction's staging window closed: policy restored", "method", t.Method, "sender", t.Sender,
			"duration", rep.Duration.Round(time.Millisecond), "guard_freezes", rep.Guard.Freezes,
			"guard_frozen_seconds", rep.Guard.Frozen.Seconds(), "guard_forced_thaws", rep.Guard.ForcedThaws,
			"write_rate_mbps", round3(float64(rep.Guard.Rate)/1e6), "iocost", rep.IOCost, "ok", err == nil)
	}()
	// No staging timeout: the window lasts as long as the transaction,
	// which is not the agent's to end.
	w, err := s.open(ctx, j, &rep, true)
	defer w.close()
	if err != nil {
		return rep, fmt.Errorf("pacing a foreign transaction: %w", err)
	}
	p := w.policy
	s.log.Info("staging policy on for a foreign transaction", "systemd_unit", s.o.DaemonUnit, "disks", rep.Disks,
		"io_scheduling_class", p.IOSchedulingClass, "io_weight", p.IOWeight, "cpu_weight", p.CPUWeight,
		"memory_high", p.MemoryHigh, "write_bandwidth_max", p.IOWriteBandwidthMax, "iocost", rep.IOCost,
		"guard", w.g != nil, "baseline", rep.Baseline)
	stop := s.pace(ctx, j, w, &rep, "")
	select {
	case <-ended:
		stop("foreign transaction ended")
	case <-ctx.Done():
		stop("agent stopping")
	}
	return rep, nil
}

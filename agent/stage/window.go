package stage

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/systemd"
)

// window is an opened staging window: what paces it, and what to close
// (the kept guard inputs, the paused rolling baseline) once it ends. The
// changes themselves are in the journal, for undo.
type window struct {
	foreign bool
	g       *guard.Guard
	base    guard.Baseline
	cost    *iocostWindow // nil: iocost off
	// policy is what the staging unit gets (the daemon has it already).
	policy systemd.Policy
	// memoryHigh is the page cache allowance the window chose (0: none),
	// in policy and kept by the memory pacer.
	memoryHigh uint64
	closers    []func()
}

// close releases what open kept, newest first; the window's changes are
// undone separately (undo), after it.
func (w *window) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// open finds the disks, takes the baseline (before anything changes) and
// opens the window (setup): shared by Run and PaceForeign. It returns a
// window to close even on error. foreign: around somebody else's
// transaction, without a staging unit.
func (s *Stager) open(ctx context.Context, j *journal, rep *Report, foreign bool) (*window, error) {
	w := &window{foreign: foreign, policy: s.o.Policy}
	if len(s.o.Paths) > 0 {
		var err error
		if rep.Disks, err = s.sched.Disks(s.o.Paths); err != nil {
			return w, err
		}
	}
	ordersData := len(rep.Disks) > 0 && s.filesystemsOrderData()
	// Normal is known before anything changes: the rolling baseline from
	// before the window, or learned now. Nothing inside the window is
	// learned.
	if s.o.Baseline != nil {
		w.closers = append(w.closers, s.o.Baseline.Pause())
	}
	costDisks := s.iocostDisks(rep.Disks, ordersData)
	useIOCost := len(costDisks) > 0
	rep.IOCost = useIOCost
	w.memoryHigh = s.choosePacing(costDisks, ordersData)
	rep.MemoryHigh = w.memoryHigh
	loop := writeRateMode(s.o.WriteRateAuto, s.o.WriteBandwidthMax, s.o.Guard.Enabled, ordersData, useIOCost) == rateLoop
	var brake *modelBrake
	if useIOCost {
		// w.cost is set below, before the guard runs.
		brake = &modelBrake{scale: func(_ context.Context, scale float64) error { return s.scaleIOCost(w.cost, scale) },
			books: s.costBooks(ctx, costDisks, foreign)}
	}
	g, base, closeInputs := s.prepareGuard(ctx, rep.Disks, loop, foreign, rep, brake)
	w.closers = append(w.closers, closeInputs)
	w.g, w.base = g, base
	if ctx.Err() != nil {
		return w, context.Cause(ctx)
	}

	setupStart := time.Now()
	s.log.Info("staging setup started", "disks", rep.Disks, "foreign", foreign)
	if useIOCost {
		w.cost = &iocostWindow{disks: costDisks, base: base, foreign: foreign, ordersData: ordersData}
	}
	mode := writeRateMode(s.o.WriteRateAuto, s.o.WriteBandwidthMax, g != nil, ordersData, useIOCost)
	policy, err := s.setup(ctx, j, rep.Disks, mode, w.cost, w.memoryHigh)
	w.policy = policy
	rep.Pacing = pacingSummary(mode, w.cost, ordersData)
	// Shown live (`status`, the metrics) until the window closes; the
	// guard, if any, adds its brake and etcd's latency to it. Wall time,
	// not s.now: status reads it against the wall clock, and the stager's
	// clock is the tests' to script.
	s.o.Guard.Board.Open(rep.Pacing, time.Now())
	w.closers = append(w.closers, s.o.Guard.Board.Close)
	rep.Setup = time.Since(setupStart)
	s.log.Info("staging setup done", "setup_seconds", round3(rep.Setup.Seconds()), "ok", err == nil)
	if err != nil {
		return w, err
	}
	if ctx.Err() != nil {
		return w, context.Cause(ctx)
	}
	return w, nil
}

// choosePacing decides the window's page cache allowance from its iocost
// disks and journal (iocost.MemoryAllowance, as doctor reports it) and
// logs the window's pacing decision once, with why.
func (s *Stager) choosePacing(costDisks []string, ordersData bool) uint64 {
	iocostOn := len(costDisks) > 0
	mem, why := iocost.MemoryAllowance(s.o.Policy.MemoryHigh, s.o.MemoryHighAuto, iocostOn, ordersData)
	how := "write rate loop or cap"
	if iocostOn {
		how = "iocost on " + strings.Join(costDisks, ", ")
		if iocost.Effective(s.o.IOCost.Mode, ordersData) == iocost.On {
			how += " (given, learned or seed model)"
		} else {
			how += " (given models)"
		}
	}
	memory := "none"
	if mem > 0 {
		memory = iocost.FormatMemory(mem)
	}
	s.log.Info("pacing chosen", "iocost", s.o.IOCost.Mode.String(),
		"iocost_as", iocost.Effective(s.o.IOCost.Mode, ordersData).String(), "journal_orders_data", ordersData,
		"pacing", how, "memory_high", memory, "memory_high_why", why)
	return mem
}

// pace starts the guard and the memory pacer on the open window (unit:
// the staging unit, "" for a foreign window). The returned stop ends them,
// learns iocost's model from the time paced (before the restore: the
// vrate is the kernel's, gone with the QoS) and puts the guard's stats in
// rep.
func (s *Stager) pace(ctx context.Context, j *journal, w *window, rep *Report, unit string) (stop func(why string)) {
	start := s.now()
	gdone := make(chan guard.Stats, 1)
	gctx, stopGuard := context.WithCancelCause(context.WithoutCancel(ctx))
	if w.g != nil {
		rep.Guarded = true
		go func() { gdone <- w.g.Run(gctx, w.base) }()
	}
	mdone := make(chan struct{})
	if pacer := s.memoryPacer(ctx, j, unit, w.memoryHigh); pacer != nil {
		go func() { defer close(mdone); pacer.run(gctx, s.log) }()
	} else {
		close(mdone)
	}
	return func(why string) {
		stopGuard(errors.New(why))
		if w.g != nil {
			// Before learning: the guard may be scaling the models.
			rep.Guard = <-gdone
		}
		s.learnIOCost(w.cost, s.now().Sub(start))
		<-mdone
	}
}

// pacingSummary says in a line how a window paces staging: iocost with
// each disk's model source, or the write cap's mode (for `status` and the
// metrics).
func pacingSummary(mode writeRate, cost *iocostWindow, ordersData bool) string {
	if cost != nil {
		var parts []string
		for _, p := range cost.plans {
			parts = append(parts, p.Disk+" "+p.Source.Short())
		}
		return "iocost (" + strings.Join(parts, ", ") + ")"
	}
	switch mode {
	case rateLoop:
		return "write rate loop"
	case rateFixed:
		return "fixed write cap"
	case rateStart:
		return "write cap at the start rate (no guard)"
	}
	if ordersData {
		return "no write cap (journal orders data)"
	}
	return "no write cap"
}

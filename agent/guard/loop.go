package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"
)

// Freezer freezes and thaws units (systemd FreezeUnit/ThawUnit).
type Freezer interface {
	Freeze(ctx context.Context, unit string) error
	Thaw(ctx context.Context, unit string) error
}

// Options configure the guard loop.
type Options struct {
	Config Config
	// Baseline entries override what is learned, field by field (e.g. a
	// configured normal wal_fsync p99).
	Baseline Baseline
	// LearnFor is how long to watch before staging to learn the baseline
	// (default 10s; the product sets guard.learn_period; negative: do not
	// learn, use Baseline alone).
	LearnFor time.Duration
	// MinObservations a signal needs in the learning window (default 20).
	MinObservations uint64
	// Interval between reads (default 1s); Window is the span a sample
	// covers (default 1s).
	Interval time.Duration
	Window   time.Duration
	// Units are paced together: the staging unit and rpm-ostreed.service.
	Units []string
	// Rate, when Set is not nil, paces the units' write rate in a closed
	// loop (StepRate) beside the freezing, which stays the emergency brake.
	Rate RateOptions
	// Model, when Set is not nil, scales the staging disks' iocost models
	// down when etcd is over the brake's limit (StepModel).
	Model ModelOptions
	// Board, when not nil, gets each step's brake state and etcd's WAL
	// fsync p99 against the baseline while the window it was opened for
	// is open (`status`, the metrics).
	Board *Board
	Clock clockwork.Clock
	Log   *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.LearnFor == 0 {
		o.LearnFor = 10 * time.Second
	}
	if o.MinObservations == 0 {
		o.MinObservations = 20
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Window <= 0 {
		o.Window = time.Second
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// RateOptions configure pacing by write rate.
type RateOptions struct {
	Config RateConfig
	// Set applies a rate (bytes/s) to the units; nil: no rate pacing.
	Set func(ctx context.Context, rate uint64) error
	// FreezeFactor: while the rate paces, freeze only above this multiple
	// of the baseline p99 when it is above Config.FreezeFactor. The brake
	// is then an emergency: on XFS, freezing at 2x beside the loop froze
	// 9-32 times per staging for the same etcd p99 as 4x with 1-3, and
	// staged slower (bench full-ostree-xfs-600MiB-3).
	FreezeFactor float64
}

// BrakeFactor is the freeze factor with the rate loop pacing (o.Rate):
// the larger of the two configured.
func (o Options) BrakeFactor() float64 {
	f := o.Config.WithDefaults().FreezeFactor
	if o.Rate.Set != nil {
		f = max(f, o.Rate.FreezeFactor)
	}
	return f
}

// Guard is the adapter: it reads inputs, asks the controller, and freezes
// or thaws the units.
type Guard struct {
	o   Options
	src Source
	fz  Freezer
	// stallBase is the stall share Learn saw (-1: none).
	stallBase float64
}

// New returns a guard.
func New(o Options, src Source, fz Freezer) (*Guard, error) {
	if err := o.Config.Validate(); err != nil {
		return nil, fmt.Errorf("latency guard: %w", err)
	}
	if len(o.Units) == 0 {
		return nil, errors.New("latency guard: no units to pace")
	}
	o.Config.FreezeFactor = o.BrakeFactor()
	return &Guard{o: o.withDefaults(), src: src, fz: fz, stallBase: -1}, nil
}

// Learn watches the inputs for LearnFor before staging starts and returns
// the baseline, configured entries overriding learned ones.
func (g *Guard) Learn(ctx context.Context) (Baseline, error) {
	base := Baseline{}
	if g.o.LearnFor > 0 {
		r0, err := g.src.Read(ctx)
		if err != nil {
			g.o.Log.Warn("latency guard: reading inputs", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("learning the latency baseline: %w", context.Cause(ctx))
		case <-g.o.Clock.After(g.o.LearnFor):
		}
		r1, err := g.src.Read(ctx)
		if err != nil {
			g.o.Log.Warn("latency guard: reading inputs", "err", err)
		}
		learned := Delta(r0, r1)
		if learned.CPUWait >= 0 {
			// Logged only: what etcd waited for a CPU before staging, to
			// read the rate decisions' etcd_cpu_wait_share against.
			g.o.Log.Info("latency guard baseline", "signal", "etcd_cpu_wait", "share", round3(learned.CPUWait), "source", "learned now, before any change")
		}
		base = BaselineFrom(learned, g.o.MinObservations)
		b, err := g.Adopt(base, learned.Stall, "learned now, before any change")
		if len(b) == 0 && g.o.Config.StallFreeze == 0 {
			return b, fmt.Errorf("learning the latency baseline: no signal had %d observations in %s", g.o.MinObservations, g.o.LearnFor)
		}
		return b, err
	}
	return g.Adopt(base, -1, "configured")
}

// Adopt takes a baseline learned elsewhere (the rolling baseline kept
// while no staging ran, or Learn's), lets configured entries override it
// field by field, clamps it with etcd's guidance (Clamp) and logs it with
// its source. stall is etcd's learned stall share (-1: none).
func (g *Guard) Adopt(base Baseline, stall float64, source string) (Baseline, error) {
	if base == nil {
		base = Baseline{}
	}
	if stall >= 0 {
		g.stallBase = stall
		g.o.Log.Info("latency guard baseline", "signal", "io_stall", "stall_share", round3(stall), "source", source)
	}
	// Clamped before the configured values override them field by field:
	// a configured threshold is the operator's word. A configured p99
	// leaves the learned median for the thaw rule.
	learned := base
	base, clamped, slow := Clamp(base)
	for k, v := range g.o.Baseline {
		k = SignalName(k)
		b := base[k]
		if v.P99 > 0 {
			b.P99 = v.P99
			clamped = slices.DeleteFunc(clamped, func(s string) bool { return s == k })
		}
		if v.Median > 0 {
			b.Median = v.Median
		}
		base[k] = b
	}
	for _, k := range sortedKeys(base) {
		a := []any{"signal", k, "p99_ms", ms(base[k].P99), "median_ms", ms(base[k].Median), "observations", base[k].N, "source", source}
		switch {
		case slices.Contains(clamped, k):
			a = append(a, "clamped_from_p99_ms", ms(learned[k].P99), "clamp", fmt.Sprintf("%gx etcd's guidance: a sick disk is not normal", SickFactor))
			g.o.Log.Warn("latency guard baseline", a...)
		case slices.Contains(slow, k):
			a = append(a, "guidance_p99_ms", ms(Guidance[k]), "note", "slower than etcd's guidance: paced against this disk's own normal")
			g.o.Log.Warn("latency guard baseline", a...)
		default:
			g.o.Log.Info("latency guard baseline", a...)
		}
	}
	return base, nil
}

// Run paces the units until ctx is done and returns the counters. It always
// thaws the units before returning, whatever ended it; failures to freeze
// or thaw are logged, not returned: staging goes on either way.
func (g *Guard) Run(ctx context.Context, base Baseline) (st Stats) {
	cfg := g.o.Config
	if cfg.StallBase == 0 && g.stallBase > 0 {
		cfg.StallBase = g.stallBase
	}
	ctrl := NewController(cfg, base)
	clk, log := g.o.Clock, g.o.Log
	var rate RateState
	var model ModelState
	othersHeld := false
	mcfg := g.o.Model.Config.WithDefaults(cfg.WithDefaults().FreezeFactor)
	if mcfg.Deadline == 0 {
		mcfg.Deadline = cfg.Deadline
	}
	maxFreeze := cfg.WithDefaults().MaxFreeze
	win := Window{Span: g.o.Window}
	long := Window{Span: RateWindow}
	// The brake counts over its own window, cut only by its own cuts: a
	// model too fast keeps the guard freezing, and a window cut at every
	// freeze and thaw held one scrape, never enough to count beyond chance
	// (TestModelBrakeCountsAcrossFreezes).
	brakeWin := Window{Span: RateWindow}
	everFrozen := false
	rateCuts := 0
	var vrates VrateSpan
	defer func() {
		why := "stopped"
		if c := context.Cause(ctx); c != nil {
			why = c.Error()
		}
		if p := recover(); p != nil {
			why = fmt.Sprint("panic: ", p)
			defer panic(p)
		}
		d := ctrl.Release(clk.Now(), why)
		if d.Action == Thaw {
			log.Info("latency guard decision", d.LogAttrs()...)
		}
		if everFrozen {
			// Thaw even if ctx is cancelled: a unit left frozen would hold
			// rpm-ostreed (and the update) forever.
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := g.thawAll(tctx); err != nil {
				log.Warn("latency guard: thawing on exit", "err", err)
			}
			cancel()
		}
		st = ctrl.Stats(clk.Now())
		st.Rate, st.RateCuts = rate.Rate, rateCuts
		st.ModelScale, st.ModelCuts = model.Scale, model.Cuts
		g.o.Board.step(func(l *Live) { l.Braking = false })
		a := []any{"freezes", st.Freezes, "forced_thaws", st.ForcedThaws,
			"futile_retries", st.FutileRetries, "frozen_seconds", round3(st.Frozen.Seconds()), "reason", why}
		if g.o.Model.Set != nil {
			a = append(a, "model_cuts", st.ModelCuts, "model_scale", round3(st.ModelScale))
		}
		log.Info("latency guard stopped", a...)
		for _, v := range vrates.Summaries() {
			log.Info("iocost vrate over the window", "disk", v.Disk, "min_pct", round3(v.Min), "mean_pct", round3(v.Mean),
				"max_pct", round3(v.Max), "end_pct", round3(v.Last), "readings", v.Readings)
		}
	}()

	var lastErr string
	// read is bounded by the next recheck (the end of a freeze): a scrape
	// that etcd is too slow to answer (its timeout is 2 s) held freezes
	// capped at 2 s for up to 5.9 s.
	read := func(recheck time.Time) (Reading, bool) {
		rctx := ctx
		if !recheck.IsZero() {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(ctx, max(recheck.Sub(clk.Now()), minRead))
			defer cancel()
		}
		r, err := g.src.Read(rctx)
		vrates.Add(r.At, r.Cost)
		if err != nil && err.Error() != lastErr && ctx.Err() == nil {
			log.Warn("latency guard: reading inputs", "err", err)
		}
		lastErr = ""
		if err != nil {
			lastErr = err.Error()
		}
		return r, r.Hists != nil || r.Disks != nil || r.Pressure != nil
	}
	if r, ok := read(time.Time{}); ok {
		win.Add(r)
		long.Add(r)
		brakeWin.Add(r)
	}
	var recheck time.Time
	var tick clockwork.Timer // one for all ticks: time.After was a timer and a channel each
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		now := clk.Now()
		wait := NextTick(now, g.o.Interval).Sub(now)
		if !recheck.IsZero() {
			wait = min(wait, max(recheck.Sub(now), time.Millisecond))
		}
		if tick == nil {
			tick = clk.NewTimer(wait)
		} else {
			tick.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return st
		case <-tick.Chan():
		}
		r, ok := read(recheck)
		if !ok {
			// Nothing read: let the controller see time pass so a freeze
			// still ends at its cap.
			r = Reading{At: clk.Now()}
		}
		ls, longOK := long.Add(r)
		bs, brakeOK := brakeWin.Add(r)
		s, ok := win.Add(r)
		if !ok {
			continue
		}
		d := ctrl.Step(s)
		recheck = d.Recheck
		var lsp *Sample
		if longOK {
			lsp = &ls
		}
		if g.o.Rate.Set != nil {
			first, lastCut := !rate.Started, rate.LastCut
			var rd RateDecision
			rs := s
			if !cfg.StallOwn {
				rs.Stall = -1 // the host's stall share counts the stager's own waits
			}
			in := RateInput{Sample: rs, StallBase: g.stallBase, Written: s.Written}
			if longOK {
				in.Long = ls
			}
			rate, rd = StepRate(g.o.Rate.Config, base, rate, in)
			cut := rate.LastCut != lastCut
			if cut {
				rateCuts++
				// What comes after a cut is judged on its own.
				long.Cut()
			}
			if rd.Changed || first || cut {
				// A cut at the floor changes nothing but is logged: it
				// says etcd suffers at the gentlest rate the loop has.
				log.Info("staging write rate", rd.LogAttrs()...)
			}
			if rd.Changed || first {
				if err := g.o.Rate.Set(ctx, rd.Rate); err != nil {
					log.Warn("staging write rate not set", "err", err)
				}
			}
		}
		if g.o.Model.Set != nil {
			in := RateInput{Sample: s}
			if brakeOK {
				in.Long = bs
			}
			var md ModelDecision
			model, md = StepModel(mcfg, base, model, in)
			if md.Cut {
				brakeWin.Cut() // what comes after a cut is judged on its own
			}
			if md.OthersHold && !othersHeld {
				// Once a run of such holds: etcd is slow, and not for the model.
				log.Info("iocost model scale", md.LogAttrs()...)
			}
			othersHeld = md.OthersHold
			if md.Changed {
				log.Info("iocost model scale", md.LogAttrs()...)
				if err := g.o.Model.Set(ctx, md.Scale); err != nil {
					log.Warn("iocost model not scaled", "err", err)
				}
			}
		}
		switch d.Action {
		case Freeze:
			everFrozen = true
			log.Info("latency guard decision", d.LogAttrs()...)
			// Bounded by the longest freeze: systemd answers once the
			// cgroup is frozen, and a task waiting in the kernel (on
			// iocost's budget) freezes only when it wakes. Unbounded, a
			// freeze call held the guard 94 s, past every thaw.
			fctx, cancel := clockwork.WithTimeout(ctx, clk, maxFreeze)
			if err := g.each(fctx, "freezing", g.fz.Freeze); err != nil {
				log.Warn("latency guard: freezing", "err", err)
			}
			cancel()
			win.Cut()
			long.Cut()
		case Thaw:
			log.Info("latency guard decision", d.LogAttrs()...)
			if err := g.thawAll(ctx); err != nil {
				log.Warn("latency guard: thawing", "err", err)
			}
			win.Cut()
			long.Cut()
		default:
			// Four times a second: the attributes are built only if logged.
			if log.Enabled(ctx, slog.LevelDebug) {
				log.Debug("latency guard decision", d.LogAttrs()...)
			}
		}
		g.o.Board.step(func(l *Live) { liveStep(l, s.At, ctrl.Frozen(), rate.Rate, base, s, lsp) })
	}
}

// NextTick is the first multiple of every after now, on the clock: the
// guard's ticks, the scrapes among them and the memory pacer's fall on the
// same instants, and the process wakes once for all of them (each
// wake-up is a pass of Go's scheduler, dear in the TCG guest), where
// waiting an interval after each tick drifted apart from the others.
func NextTick(now time.Time, every time.Duration) time.Time {
	return now.Truncate(every).Add(every)
}

// minRead is the least time a read gets when a recheck is near.
const minRead = 100 * time.Millisecond

func (g *Guard) each(ctx context.Context, what string, f func(context.Context, string) error) error {
	var errs []error
	for _, u := range g.o.Units {
		if err := f(ctx, u); err != nil {
			// A unit that is not running (rpm-ostreed exited) cannot be
			// frozen: worth a debug line, not an alarm.
			g.o.Log.Debug("latency guard: "+what, "systemd_unit", u, "err", err)
			errs = append(errs, err)
		}
	}
	// Only all units failing is worth a warning: one of them (rpm-ostreed
	// between transactions, the stager once it exited) is often not running.
	if len(errs) == len(g.o.Units) {
		return errors.Join(errs...)
	}
	return nil
}

func (g *Guard) thawAll(ctx context.Context) error {
	return g.each(ctx, "thawing", g.fz.Thaw)
}

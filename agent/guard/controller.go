// Package guard paces the staging units from the latency etcd sees: it
// freezes them when etcd's fsync latency climbs well above normal and thaws
// them when it is back near normal, with a cap on each freeze and a minimum
// running share so staging always finishes. controller.go is the pure
// decision core; loop.go reads the inputs and freezes/thaws through systemd.
package guard

import (
	"fmt"
	"strings"
	"time"
)

// Stat is one latency signal over the last window.
type Stat struct {
	P99    time.Duration
	Median time.Duration
	N      uint64 // observations in the window
}

// Sample is what the guard knows at one instant.
type Sample struct {
	At time.Time
	// Latency holds etcd's signals (wal_fsync, backend_commit): they decide
	// whenever any of them has observations in the window.
	Latency map[string]Stat
	// Hists are the window's histograms of Latency's signals, for counts
	// above a threshold.
	Hists map[string]Histogram
	// Kernel holds disk await per disk ("disk_await/vdb"); it decides when
	// etcd is not watched or completed nothing in the window (an fsync
	// stuck for longer than the window is observed only when it ends).
	Kernel map[string]Stat
	// Stall is the PSI "some" I/O stall share (0-1) over the window, -1
	// when not read.
	Stall float64
	// CPUWait is etcd's unit's PSI "some" CPU share (0-1) over the window,
	// -1 when not read. It decides nothing and is logged beside the rate
	// decisions: etcd over target while it waits for a CPU rather than
	// for I/O is not the write rate's doing (cpu-pressure-300MiB-1).
	CPUWait float64
	// Written is what the disks wrote over the window (bytes/s, all
	// writers): the rate controller does not raise a cap they did not
	// keep up with.
	Written float64
	// QueueDepth is the deepest mean device queue (requests in flight)
	// among the disks over the window.
	QueueDepth float64
	// MetricsTimeout: the newest scrape of etcd's metrics timed out.
	MetricsTimeout bool
	// Others is the largest share (0-1+) of a staging disk's iocost
	// budget that everything but the stager used over the window, from
	// the kernel's own books (CostInputs); -1 when unknown. The model
	// brake never cuts the other tenants below what they use.
	Others float64
	// Books: iocost's books were read at both ends of the window (the
	// share may still be unknown); Span is the window's length.
	Books bool
	Span  time.Duration
}

// Baseline is each signal's normal p99 and median, learned before staging
// or configured.
type Baseline map[string]Stat

// Config tunes the controller. Zero fields take the defaults below; the
// benchmark decides what ships.
type Config struct {
	// FreezeFactor: freeze when a signal's p99 exceeds this times its
	// baseline p99 (default 2).
	FreezeFactor float64
	// ThawFactor: thaw when every signal's median is within this times its
	// baseline median (default 1.5). Requiring every sample to be low
	// starved the stager in the prototype; the median does not.
	ThawFactor float64
	// MinP99 and MinMedian floor the baseline, so that a very fast idle
	// disk does not make ordinary jitter look like an incident.
	MinP99    time.Duration // default 2ms
	MinMedian time.Duration // default 1ms
	// MinFreeze and MaxFreeze bound one freeze (defaults 200ms, 2s).
	MinFreeze time.Duration
	MaxFreeze time.Duration
	// MinRunShare is the least share of time the stager runs: after a
	// freeze of F it runs at least F*s/(1-s) before it can be frozen
	// again (default 0.2; see RunShareFor).
	MinRunShare float64
	// Deadline: past it the guard stops pacing so staging finishes
	// (0: none).
	Deadline time.Duration
	// MaxTotalFrozen: once the units were frozen this long in all, the
	// guard stops pacing rather than starve staging (0: no limit).
	MaxTotalFrozen time.Duration
	// StallFreeze freezes when the PSI stall share reaches it, StallThaw
	// is the share below which it allows a thaw (0: PSI not used).
	StallFreeze float64
	StallThaw   float64
	// StallOwn says the stall share is etcd's own (its cgroup's
	// io.pressure): it then stands in for etcd's latency when the metrics
	// have nothing, instead of disk await, which counts the stager's own
	// requests and so paces staging against itself.
	StallOwn bool
	// StallBase is the stall share learned before staging: the freeze and
	// thaw levels are at least FreezeFactor and ThawFactor times it, so a
	// member that normally waits on its disk a lot is not frozen for it.
	StallBase float64
	// FutileFreezes: after this many freezes in a row ended at MaxFreeze
	// with etcd still slow, freezing is seen not to help, and the brake
	// freezes at most once per FutileRetry until a freeze helps again
	// (defaults 3 and 1m; negative FutileFreezes: always freeze).
	// Measured on the 20 MB/s disk: 104 of 109 freezes ended at the cap
	// on ext4 (a frozen stager's ordered data still drains under its
	// cap, and the journal commit etcd waits on with it) and 79 of 92 on
	// XFS, with etcd no better than unfrozen at a fixed cap.
	FutileFreezes int
	FutileRetry   time.Duration
}

// stallLevels are the effective freeze and thaw stall shares.
func (c Config) stallLevels() (freeze, thaw float64) {
	freeze = max(c.StallFreeze, min(c.StallBase*c.FreezeFactor, 0.95))
	thaw = max(c.StallThaw, min(c.StallBase*c.ThawFactor, freeze*0.9))
	return freeze, thaw
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.FreezeFactor, 2)
	def(&c.ThawFactor, 1.5)
	def(&c.MinRunShare, 0.2)
	defD(&c.MinP99, 2*time.Millisecond)
	defD(&c.MinMedian, time.Millisecond)
	defD(&c.MinFreeze, 200*time.Millisecond)
	defD(&c.MaxFreeze, 2*time.Second)
	if c.FutileFreezes == 0 {
		c.FutileFreezes = 3
	}
	defD(&c.FutileRetry, time.Minute)
	if c.StallFreeze > 0 && c.StallThaw == 0 {
		c.StallThaw = c.StallFreeze / 2
	}
	return c
}

// Validate checks the ranges.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.FreezeFactor <= 1:
		return fmt.Errorf("freeze factor %g: want > 1", c.FreezeFactor)
	case c.ThawFactor < 1 || c.ThawFactor > c.FreezeFactor:
		return fmt.Errorf("thaw factor %g: want 1..freeze factor (%g)", c.ThawFactor, c.FreezeFactor)
	case c.MinFreeze > c.MaxFreeze:
		return fmt.Errorf("min freeze %s above max freeze %s", c.MinFreeze, c.MaxFreeze)
	case c.MinRunShare <= 0 || c.MinRunShare > 1:
		return fmt.Errorf("min run share %g: want (0, 1]", c.MinRunShare)
	case c.StallFreeze < 0 || c.StallFreeze > 1 || c.StallThaw > c.StallFreeze:
		return fmt.Errorf("stall thresholds %g/%g: want 0 <= thaw <= freeze <= 1", c.StallThaw, c.StallFreeze)
	}
	return nil
}

// RunShareFor derives the minimum running share from a staging deadline and
// how long staging takes unpaced: running at least expected/deadline of the
// time finishes by the deadline. Clamped to [0.1, 1].
func RunShareFor(deadline, expected time.Duration) float64 {
	if deadline <= 0 || expected <= 0 {
		return 0.2
	}
	s := float64(expected) / float64(deadline)
	return min(max(s, 0.1), 1)
}

// Action is what the controller asks for.
type Action int

const (
	Hold Action = iota
	Freeze
	Thaw
)

func (a Action) String() string {
	return [...]string{"hold", "freeze", "thaw"}[a]
}

// Decision is one step's outcome with the numbers behind it, for the log.
type Decision struct {
	At     time.Time
	Action Action
	Reason string
	Forced bool // a thaw the latency did not allow: cap, deadline, stop
	// Signal is the worst signal; P99 vs Limit decided a freeze, Median vs
	// ThawLevel a thaw.
	Signal    string
	P99       time.Duration
	Limit     time.Duration
	Median    time.Duration
	ThawLevel time.Duration
	N         uint64
	Stall     float64
	CPUWait   float64 // logged only (Sample.CPUWait)
	FrozenFor time.Duration
	RunShare  float64 // share of time the stager ran since the start
	// Recheck asks for the next sample no later than this (zero: the
	// usual interval).
	Recheck time.Time
}

// LogAttrs are the decision's numbers as slog key/value pairs.
func (d Decision) LogAttrs() []any {
	a := []any{"action", d.Action.String(), "reason", d.Reason, "forced", d.Forced,
		"signal", d.Signal, "p99_ms", ms(d.P99), "limit_ms", ms(d.Limit),
		"median_ms", ms(d.Median), "thaw_level_ms", ms(d.ThawLevel), "observations", d.N,
		"frozen_for_ms", ms(d.FrozenFor), "run_share", round3(d.RunShare)}
	if d.Stall >= 0 {
		a = append(a, "io_stall_share", round3(d.Stall))
	}
	if d.CPUWait >= 0 {
		a = append(a, "etcd_cpu_wait_share", round3(d.CPUWait))
	}
	return a
}

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }
func round3(f float64) float64 {
	return float64(int64(f*1000+0.5)) / 1000
}

// Stats count what the guard did.
type Stats struct {
	Freezes     int
	ForcedThaws int
	Frozen      time.Duration
	// Rate is the write rate the rate controller ended at, RateCuts how
	// often it cut (0 when not pacing by rate).
	Rate     uint64
	RateCuts int
	// ModelScale is the scale the model brake ended at (0: not on),
	// ModelCuts how often it cut.
	ModelScale float64
	ModelCuts  int
	// FutileRetries counts freezes tried once freezing was seen not to
	// help (Config.FutileFreezes).
	FutileRetries int
}

// Controller is the guard's state machine. It does no I/O: samples in,
// decisions out.
type Controller struct {
	cfg  Config
	base Baseline
	// latencyLearned: the baseline has an etcd latency signal.
	latencyLearned bool

	started     bool
	start       time.Time
	frozen      bool
	frozenSince time.Time
	lastThaw    time.Time
	lastFreeze  time.Duration
	// futile counts the freezes in a row that reached the cap with the
	// latency still high.
	futile int
	stats  Stats
}

// NewController returns a controller for a staging run that starts with the
// first sample.
func NewController(cfg Config, base Baseline) *Controller {
	b := Baseline{}
	learned := false
	for k, v := range base {
		b[SignalName(k)] = v
		learned = learned || !strings.HasPrefix(SignalName(k), "disk_await/")
	}
	return &Controller{cfg: cfg.WithDefaults(), base: b, latencyLearned: learned}
}

// Frozen reports whether the last decision left the units frozen.
func (c *Controller) Frozen() bool { return c.frozen }

// Stats returns the counters; Frozen includes a freeze still going at now.
func (c *Controller) Stats(now time.Time) Stats {
	s := c.stats
	if c.frozen {
		s.Frozen += now.Sub(c.frozenSince)
	}
	return s
}

// view is the worst signal of a sample against the baseline.
type view struct {
	signal            string
	p99, limit        time.Duration
	median, thawLevel time.Duration
	n                 uint64
	high              bool // p99 over its limit, or PSI stall over its threshold
	calm              bool // medians near baseline (and PSI low), known
}

func (c *Controller) evaluate(s Sample) view {
	v := view{}
	sigs := withData(s.Latency, c.base)
	if len(sigs) == 0 && !(c.cfg.StallOwn && c.cfg.StallFreeze > 0 && s.Stall >= 0) {
		sigs = withData(s.Kernel, c.base)
	}
	worstFreeze, worstThaw := -1.0, -1.0
	calm := len(sigs) > 0
	for _, name := range sortedKeys(sigs) {
		st, b := sigs[name], c.base[name]
		limit := time.Duration(c.cfg.FreezeFactor * float64(max(b.P99, c.cfg.MinP99)))
		thaw := time.Duration(c.cfg.ThawFactor * float64(max(b.Median, c.cfg.MinMedian)))
		if r := float64(st.P99) / float64(limit); r > worstFreeze {
			worstFreeze = r
			v.signal, v.p99, v.limit, v.n = name, st.P99, limit, st.N
		}
		if r := float64(st.Median) / float64(thaw); r > worstThaw {
			worstThaw = r
			v.median, v.thawLevel = st.Median, thaw
		}
		if st.Median > thaw {
			calm = false
		}
	}
	v.high = worstFreeze > 1
	if c.cfg.StallFreeze > 0 && s.Stall >= 0 {
		freezeAt, thawAt := c.cfg.stallLevels()
		if s.Stall >= freezeAt {
			v.high = true
			if v.signal == "" {
				v.signal = "io_stall"
			}
		}
		if len(sigs) == 0 {
			// PSI alone is the evidence only when no latency signal was
			// learned: one that is silent in this window (etcd's metrics
			// are scraped every few seconds) is unknown, not calm. Seen: PSI
			// thawed within 0.3 s while etcd's next scrape showed p99 3x.
			calm = !c.latencyLearned
		}
		calm = calm && s.Stall < thawAt
	}
	v.calm = calm
	return v
}

func withData(m map[string]Stat, base Baseline) map[string]Stat {
	out := map[string]Stat{}
	for k, s := range m {
		if _, ok := base[k]; ok && s.N > 0 {
			out[k] = s
		}
	}
	return out
}

// Step takes one sample and decides.
func (c *Controller) Step(s Sample) Decision {
	if !c.started {
		c.started, c.start, c.lastThaw = true, s.At, s.At
	}
	v := c.evaluate(s)
	d := Decision{At: s.At, Signal: v.signal, P99: v.p99, Limit: v.limit, Median: v.median,
		ThawLevel: v.thawLevel, N: v.n, Stall: s.Stall, CPUWait: s.CPUWait}
	pastDeadline := c.cfg.Deadline > 0 && s.At.Sub(c.start) >= c.cfg.Deadline
	spent := c.cfg.MaxTotalFrozen > 0 && c.Stats(s.At).Frozen >= c.cfg.MaxTotalFrozen
	if c.frozen {
		d.FrozenFor = s.At.Sub(c.frozenSince)
		switch {
		case pastDeadline:
			c.thaw(&d, "staging deadline reached: pacing stops", true)
		case spent:
			c.thaw(&d, "total freeze budget spent: pacing stops", true)
		case d.FrozenFor >= c.cfg.MaxFreeze:
			c.thaw(&d, "freeze reached its cap", true)
			if !v.calm {
				c.futile++
			}
		case d.FrozenFor < c.cfg.MinFreeze:
			d.Reason = "frozen: shortest freeze not over"
			d.Recheck = c.frozenSince.Add(c.cfg.MinFreeze)
		case v.calm:
			// Not "every sample low": one slow fsync in the window must not
			// keep the stager frozen (that starved the prototype).
			c.thaw(&d, "median back near baseline", false)
			c.futile = 0
		case v.n == 0 && !v.high && c.latencyLearned:
			d.Reason = "frozen: no latency observed in the window"
			d.Recheck = c.frozenSince.Add(c.cfg.MaxFreeze)
		default:
			d.Reason = "frozen: median or stall share still above thaw level"
			d.Recheck = c.frozenSince.Add(c.cfg.MaxFreeze)
		}
	} else {
		minRun := time.Duration(0)
		if c.cfg.MinRunShare < 1 {
			minRun = time.Duration(float64(c.lastFreeze) * c.cfg.MinRunShare / (1 - c.cfg.MinRunShare))
		}
		ran := s.At.Sub(c.lastThaw)
		switch {
		case pastDeadline:
			d.Reason = "staging deadline passed: not pacing"
		case spent:
			d.Reason = "total freeze budget spent: not pacing"
		case !v.high:
			d.Reason = "latency within limit"
		case c.cfg.MinRunShare >= 1:
			d.Reason = "latency high but the run share floor is 1: never freezing"
		case c.futileNow() && ran < c.cfg.FutileRetry:
			d.Reason = fmt.Sprintf("latency high but freezing has not helped (the last %d freezes reached the %s cap with etcd still slow): next try %s after the last",
				c.futile, c.cfg.MaxFreeze, c.cfg.FutileRetry)
			d.Recheck = c.lastThaw.Add(c.cfg.FutileRetry)
		case ran < minRun:
			d.Reason = fmt.Sprintf("latency high but the stager must run %s after a %s freeze (ran %s)",
				minRun.Round(time.Millisecond), c.lastFreeze.Round(time.Millisecond), ran.Round(time.Millisecond))
			d.Recheck = c.lastThaw.Add(minRun)
		default:
			c.frozen, c.frozenSince = true, s.At
			c.stats.Freezes++
			if c.futileNow() {
				c.stats.FutileRetries++
			}
			d.Action = Freeze
			d.Reason = "p99 above limit"
			if v.p99 <= v.limit {
				d.Reason = "I/O stall share above threshold"
			}
			d.Recheck = s.At.Add(c.cfg.MinFreeze)
		}
	}
	d.RunShare = c.runShare(s.At)
	return d
}

// futileNow says whether freezing was seen not to help.
func (c *Controller) futileNow() bool {
	return c.cfg.FutileFreezes > 0 && c.futile >= c.cfg.FutileFreezes
}

// Release is the decision when the guard stops: thaw if frozen.
func (c *Controller) Release(now time.Time, why string) Decision {
	d := Decision{At: now, Reason: "guard stopping: " + why, Stall: -1, CPUWait: -1}
	if c.frozen {
		d.FrozenFor = now.Sub(c.frozenSince)
		c.thaw(&d, d.Reason, true)
	}
	d.RunShare = c.runShare(now)
	return d
}

func (c *Controller) thaw(d *Decision, reason string, forced bool) {
	dur := d.At.Sub(c.frozenSince)
	c.frozen = false
	c.lastThaw, c.lastFreeze = d.At, dur
	c.stats.Frozen += dur
	if forced {
		c.stats.ForcedThaws++
	}
	d.Action, d.Reason, d.Forced = Thaw, reason, forced
}

func (c *Controller) runShare(now time.Time) float64 {
	el := now.Sub(c.start)
	if el <= 0 {
		return 1
	}
	return 1 - float64(c.Stats(now).Frozen)/float64(el)
}

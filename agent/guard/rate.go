package guard

import (
	"fmt"
	"math"
	"time"
)

// The rate controller paces staging by its write rate (IOWriteBandwidthMax=
// on the staging unit and rpm-ostreed) instead of by freezing it: a fixed
// cap is right for one disk only (measured: 5 MB/s held etcd on a 20 MB/s
// disk and made staging 5x slower on a 125 MB/s one). It works like TCP's
// congestion control: it starts low and doubles while etcd is calm (slow
// start), cuts the rate by a factor as soon as etcd's latency or its I/O
// stall share goes over target, then probes up by a fixed step. Freezing
// (Controller) stays as the emergency brake above a higher limit.

// RateConfig tunes the rate controller. Zero fields take the defaults.
type RateConfig struct {
	// Start is the first rate (default 4 MB/s); Max bounds it (default
	// 1 GB/s). Min is an absolute floor, 0 by default: the floor is
	// relative to the disk instead (MinShare), because an absolute one is
	// right for one disk only. At 4 MB/s (the floor until then) the loop
	// never paced a disk that cannot take 4 MB/s of the stager's small
	// writes, and on the 20 MB/s disk (bench floor-300MiB-1) cuts below
	// 4 MB/s did not lower etcd's latency (the device queue was under one
	// request deep at 1-1.5 MB/s) and made staging 2x slower; on ext4
	// they made it worse (data=ordered: an fsync's journal commit waits
	// for the stager's capped write-back), etcd's p99 48x alone against
	// 32x unpaced.
	Min, Max, Start uint64
	// MinShare (default 0.25) puts the floor at this share of the highest
	// write rate the staging disks achieved in the window so far
	// (RateState.PeakWritten; 4-5 MB/s on that 20 MB/s disk, as measured
	// best), and never below Min. Before anything is measured the floor is
	// Min when set, else Start. Negative: Min (default Start) is the floor
	// (the earlier behaviour).
	MinShare float64
	// IOSize paces IOPS beside bytes: the write IOPS cap (io.max wiops)
	// is the rate divided by IOSize (default 16 KiB; negative: no IOPS
	// cap). ostree writes thousands of small files: a byte rate a disk
	// takes in large writes is more IOPS than it has in 4 KiB ones.
	IOSize int64
	// Step is the least increase after the first cut (default 250 kB/s).
	// Near the rate that was cut last the step is 2% of the rate when
	// that is more: probing a small disk by a fixed MB/s overshoots it
	// every few seconds. Below 80% of that rate it is an eighth of the
	// rate, so a fast disk is not probed for minutes after a cut.
	Step uint64
	// Backoff multiplies the rate on congestion (default 0.5).
	Backoff float64
	// Target: congestion when a signal's p99 exceeds Target times its
	// baseline p99 (default 1.3: the product's promise). Over the long
	// window (RateInput.Long) that reads: more than Excess of the
	// observations slower than Target x baseline p99, beyond chance.
	Target float64
	// Excess is the share of observations above the target that the
	// promise allows (default 0.01: a p99 at the target). Between that
	// share and the cut (the share plus chance) the rate holds: probing
	// only while every signal keeps the promise itself is a dead band.
	// Without it the loop probed up while up to 4 of 125 observations
	// were over target, holding about a p96 (full-ostree-xfs-600MiB-2:
	// 13-30 cuts per staging, each probed back up).
	Excess float64
	// MinP99 floors the baseline p99, as Config.MinP99 (default 2ms).
	MinP99 time.Duration
	// StallTarget: congestion when etcd's stall share exceeds the learned
	// share plus this (default 0.1; 0 after defaults is never: set <0).
	StallTarget float64
	// ProbeEvery spaces increases (default RateWindow: each raise is
	// judged by a whole long window of what came after it); Cooldown is
	// the time after a cut during which the effect of the cut is not
	// visible yet and the controller neither cuts again nor raises
	// (default 2s: one sample window plus the time the queue takes to
	// drain).
	ProbeEvery time.Duration
	Cooldown   time.Duration
	// QueueHold: no probing up while a staging disk's mean queue is
	// deeper than this many requests (default 4): the disk already has
	// more than it serves, and a higher cap only lengthens the queue an
	// fsync waits behind. Negative: not used.
	QueueHold float64
	// QueueCut: without etcd's signals, a staging disk's mean queue deeper
	// than this is congestion (default 2 x QueueHold).
	QueueCut float64
	// Headroom: the rate is not raised above Headroom times the write rate
	// the disks achieved (default 2), so a cap that does not bind (the
	// stager busy on the CPU) does not climb without limit.
	Headroom float64
}

// WithDefaults fills zero fields.
func (c RateConfig) WithDefaults() RateConfig {
	defU := func(v *uint64, d uint64) {
		if *v == 0 {
			*v = d
		}
	}
	defF := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defU(&c.Max, 1_000_000_000)
	defU(&c.Start, 4_000_000)
	defF(&c.MinShare, 0.25)
	if c.MinShare < 0 {
		defU(&c.Min, c.Start)
	}
	if c.IOSize == 0 {
		c.IOSize = 16 << 10
	}
	defU(&c.Step, 250_000)
	defF(&c.Backoff, 0.5)
	defF(&c.Target, 1.3)
	defF(&c.Excess, 0.01)
	defF(&c.StallTarget, 0.1)
	defF(&c.Headroom, 2)
	defF(&c.QueueHold, 4)
	defF(&c.QueueCut, 2*c.QueueHold)
	defD(&c.MinP99, 2*time.Millisecond)
	defD(&c.ProbeEvery, RateWindow)
	defD(&c.Cooldown, 2*time.Second)
	c.Start = min(max(c.Start, c.Min), c.Max)
	return c
}

// leastRate keeps a relative floor above zero (io.max takes no 0): one
// 64 KiB request a second.
const leastRate = 64 << 10

// Floor is the lowest rate the loop cuts to in state st (see Min and
// MinShare).
func (c RateConfig) Floor(st RateState) uint64 {
	c = c.WithDefaults()
	if c.MinShare < 0 {
		return c.Min
	}
	if st.PeakWritten <= 0 {
		if c.Min > 0 {
			return c.Min
		}
		return c.Start
	}
	return max(uint64(c.MinShare*st.PeakWritten), c.Min, leastRate)
}

// IOPS is the write IOPS cap that goes with rate (0: none).
func (c RateConfig) IOPS(rate uint64) uint64 {
	c = c.WithDefaults()
	if c.IOSize <= 0 {
		return 0
	}
	return max(rate/uint64(c.IOSize), 1)
}

// Validate checks the ranges.
func (c RateConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Min > c.Max:
		return fmt.Errorf("rate bounds %d..%d: min above max", c.Min, c.Max)
	case c.MinShare > 1:
		return fmt.Errorf("rate floor share %g: want <= 1", c.MinShare)
	case c.Backoff <= 0 || c.Backoff >= 1:
		return fmt.Errorf("rate backoff %g: want (0, 1)", c.Backoff)
	case c.Target <= 1:
		return fmt.Errorf("rate target %g: want > 1", c.Target)
	case c.Headroom < 1:
		return fmt.Errorf("rate headroom %g: want >= 1", c.Headroom)
	case c.Excess <= 0 || c.Excess >= 0.5:
		return fmt.Errorf("rate excess share %g: want (0, 0.5)", c.Excess)
	}
	return nil
}

// RateState is the controller's memory between steps.
type RateState struct {
	Rate      uint64
	SlowStart bool // no congestion seen yet: increases double the rate
	Started   bool
	LastCut   time.Time
	LastRaise time.Time
	// CutFrom is the rate the last cut started from: too much then.
	CutFrom uint64
	// PeakWritten is the highest write rate the staging disks achieved
	// in the window (bytes/s): what the relative floor is a share of.
	PeakWritten float64
}

// RateInput is what one step sees: the guard's sample (etcd's latency,
// disk await, etcd's stall share), the stall share learned before
// staging (-1: none), and the write rate the staging disks achieved over
// the sample (bytes/s, 0: unknown). Long is the same over a longer window
// (RateWindow, since the last cut) whose histograms, when present, decide
// etcd's congestion instead of Sample's p99: a second holds about 25 of
// etcd's fsyncs, too few to tell a p99 from chance.
type RateInput struct {
	Sample    Sample
	Long      Sample
	StallBase float64
	Written   float64
}

// RateDecision is one step's outcome, with the numbers behind it.
type RateDecision struct {
	At      time.Time
	Rate    uint64
	Changed bool
	Reason  string
	// Signal is the signal that decided, Value vs Target its ratio to
	// baseline and the limit.
	Signal     string
	Value      time.Duration
	TargetP99  time.Duration
	Stall      float64
	CPUWait    float64 // etcd's CPU pressure share, logged only (Sample.CPUWait)
	QueueDepth float64
	Congested  bool
	// Quiet: every counted signal kept within the promise's share
	// (RateConfig.Excess), so probing up may not break it.
	Quiet bool
	// Silent: etcd is watched (the baseline has its signals) but none of
	// them had an observation to count; quiet cannot be told then.
	Silent bool
	// Over is how many of the long window's N observations of Signal were
	// slower than TargetP99, against OverLimit allowed (0: not counted).
	Over, OverLimit float64
	N               uint64
}

// RateWindow is the long window's span.
const RateWindow = 5 * time.Second

// excessLimit is how many of n observations may be above the target by
// chance when a share e is allowed: the mean plus two standard deviations
// (binomial, e small) plus one, so a handful is never congestion.
func excessLimit(n uint64, e float64) float64 {
	m := e * float64(n)
	return m + 2*math.Sqrt(m) + 1
}

// LogAttrs are the decision's numbers as slog key/value pairs.
func (d RateDecision) LogAttrs() []any {
	a := []any{"write_rate_mbps", round3(float64(d.Rate) / 1e6), "reason", d.Reason, "congested", d.Congested}
	a = d.signalAttrs(a, "target")
	if d.QueueDepth > 0 {
		a = append(a, "queue_depth", round3(d.QueueDepth))
	}
	if d.Stall >= 0 {
		a = append(a, "io_stall_share", round3(d.Stall))
	}
	if d.CPUWait >= 0 {
		a = append(a, "etcd_cpu_wait_share", round3(d.CPUWait))
	}
	return a
}

// signalAttrs appends the deciding signal's numbers, its threshold
// named what ("target": the rate loop's, "limit": the model brake's).
func (d RateDecision) signalAttrs(a []any, what string) []any {
	if d.Signal != "" && d.TargetP99 > 0 {
		a = append(a, "signal", d.Signal, "p99_ms", ms(d.Value), what+"_ms", ms(d.TargetP99))
		if d.OverLimit > 0 {
			a = append(a, "over_"+what, round3(d.Over), "over_allowed", round3(d.OverLimit), "observations", d.N)
		}
	} else if d.Signal != "" {
		a = append(a, "signal", d.Signal)
	}
	return a
}

// congestion says whether the sample shows etcd suffering: any etcd
// latency signal with observations over Target x baseline p99, or etcd's
// stall share over its baseline + StallTarget. With neither (a host
// without etcd, or etcd silent in the window) the staging disks' queue
// decides: deeper than QueueCut is congestion. Disk await does not: it
// counts the stager's own requests, so pacing on it paces staging against
// itself. known is false when nothing in the sample can tell.
func (c RateConfig) congestion(base Baseline, in RateInput) (d RateDecision, known bool) {
	d.Stall, d.CPUWait, d.QueueDepth = in.Sample.Stall, in.Sample.CPUWait, in.Sample.QueueDepth
	worst := 0.0
	d.Quiet = true
	counted := false
	for _, name := range sortedKeys(in.Sample.Latency) {
		st, b := in.Sample.Latency[name], base[name]
		if _, ok := base[name]; !ok {
			continue
		}
		h, long := in.Long.Hists[name]
		if in.Long.Hists != nil && !long {
			// The long window cannot tell (its base reading failed to
			// scrape): the signal is unknown, not judged by one second.
			continue
		}
		if st.N == 0 && (!long || h.Total() == 0) {
			continue
		}
		known, counted = true, true
		tgt := time.Duration(c.Target * float64(max(b.P99, c.MinP99)))
		r := float64(st.P99) / float64(tgt)
		var over, limit float64
		var n uint64
		if long && h.Total() > 0 {
			// Counted over the long window: congested when more of its
			// observations beat the target than the promise and chance
			// allow, however slow the slowest was.
			n = h.Total()
			over, limit = h.Above(tgt), excessLimit(n, c.Excess)
			r = over / limit
			if over > c.Excess*float64(n) {
				d.Quiet = false
			}
		} else if r > 1 {
			d.Quiet = false
		}
		if r > worst {
			worst = r
			d.Signal, d.Value, d.TargetP99 = name, st.P99, tgt
			d.Over, d.OverLimit, d.N = over, limit, n
		}
	}
	d.Congested = worst > 1
	if !counted && len(base) > 0 {
		// etcd finished no fsync in the window, or could not be read: it
		// may be stalled, so the stall share alone must not let the rate
		// probe up (the demo probed 4 -> 5.5 MB/s right after a cut so).
		d.Quiet, d.Silent = false, true
	}
	if in.Sample.MetricsTimeout {
		// Seen on the TCG guest: scrapes timing out for minutes while the
		// device queue alone said calm, and the rate probed up.
		known, d.Congested, d.Signal = true, true, "metrics_timeout"
	}
	stallKnown := in.Sample.Stall >= 0 && c.StallTarget > 0
	if !known && !stallKnown && len(in.Sample.Kernel) > 0 && c.QueueHold > 0 {
		known = true
		if in.Sample.QueueDepth > c.QueueCut {
			d.Congested, d.Signal = true, "device_queue"
		}
	}
	if stallKnown {
		known = true
		if in.Sample.Stall > max(in.StallBase, 0)+c.StallTarget {
			d.Congested = true
			if worst <= 1 {
				d.Signal = "io_stall"
			}
		}
	}
	return d, known
}

// StepRate is the rate controller: a pure function of its state, the
// baseline and one input. It cuts multiplicatively on congestion (once
// per Cooldown, as a cut shows only a window later), raises after calm
// samples (doubling before the first congestion, by Step after it), and
// holds when the input says nothing.
func StepRate(cfg RateConfig, base Baseline, st RateState, in RateInput) (RateState, RateDecision) {
	cfg = cfg.WithDefaults()
	now := in.Sample.At
	if !st.Started {
		st = RateState{Rate: cfg.Start, SlowStart: true, Started: true, LastRaise: now}
	}
	st.PeakWritten = max(st.PeakWritten, in.Written)
	d, known := cfg.congestion(base, in)
	d.At = now
	old := st.Rate
	sinceCut := now.Sub(st.LastCut)
	switch {
	case !known:
		d.Reason = "no signal in the window: holding"
	case d.Congested && !st.LastCut.IsZero() && sinceCut < cfg.Cooldown:
		d.Reason = "congested, but the last cut has not shown yet"
	case d.Congested:
		st.CutFrom = st.Rate
		st.Rate = max(uint64(float64(st.Rate)*cfg.Backoff), min(cfg.Floor(st), st.Rate))
		st.SlowStart, st.LastCut = false, now
		d.Reason = "etcd over target: cutting"
		switch d.Signal {
		case "device_queue":
			d.Reason = "device queue too deep: cutting"
		case "metrics_timeout":
			d.Reason = "etcd did not answer its metrics in time: cutting"
		}
	case !st.LastCut.IsZero() && sinceCut < cfg.Cooldown:
		d.Reason = "calm, waiting out the last cut"
	case now.Sub(st.LastRaise) < cfg.ProbeEvery:
		d.Reason = "calm"
	case d.Silent:
		d.Reason = "etcd silent in the window: holding"
	case !d.Quiet:
		d.Reason = "within chance of the target, not within the promise: holding"
	case cfg.QueueHold > 0 && in.Sample.QueueDepth > cfg.QueueHold:
		d.Reason = fmt.Sprintf("calm, but the device queue is %.1f deep: holding", in.Sample.QueueDepth)
	default:
		// Additive near the rate that was too much last time; quicker
		// well below it, so a fast disk is not probed for minutes after a
		// cut (CUBIC's idea, in two speeds).
		step := max(cfg.Step, st.Rate/50)
		if float64(st.Rate) < 0.8*float64(st.CutFrom) {
			step = max(step, st.Rate/8)
		}
		next := st.Rate + step
		if st.SlowStart {
			next = st.Rate * 2
		}
		if in.Written > 0 {
			// Slow start may overshoot what the disks did (Headroom);
			// after it, only a cap the disks kept up with is raised: one
			// they fell behind is already beyond what they take, and
			// one the stager does not reach does not bind.
			limit := uint64(in.Written * cfg.Headroom)
			if !st.SlowStart && in.Written < 0.95*float64(st.Rate) {
				limit = st.Rate
			}
			if next > limit {
				next = max(limit, st.Rate)
			}
		}
		st.Rate = min(next, cfg.Max)
		st.LastRaise = now
		d.Reason = "calm: probing up"
		if st.SlowStart {
			d.Reason = "calm: probing up (slow start)"
		}
		if st.Rate == old {
			d.Reason = "calm, but the cap does not bind: holding"
		}
	}
	d.Rate, d.Changed = st.Rate, st.Rate != old
	return st, d
}

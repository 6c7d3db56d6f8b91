package guard

import (
	"context"
	"time"
)

// The model brake. Under iocost the kernel paces staging by a cost model
// scaled by vrate, which it moves on the device's completion latency. A
// model that overstates the disk (given wrong, or learned where the
// device met the QoS at several times a throttled disk's rate) lets the
// stager take what etcd needs, and neither the QoS nor freezing catches
// it: on ext4's small disk a model 4x too fast held etcd at x3.79 alone,
// 12 of 13 freezes ending at their cap (ordered data drains frozen or
// not; wrongmodel-ext4-200MiB-2). etcd's own latency over the brake's
// limit scales the model down instead: the kernel then charges every
// staging request more, write-back included, at once. The vrate is held
// where it was at the cut, so the kernel does not raise the rate back on
// the same device latency that missed the problem.

// ModelConfig tunes the model brake. Zero fields take the defaults.
type ModelConfig struct {
	// Factor: a cut when etcd's latency is over Factor x its baseline
	// p99 beyond chance, counted over 5 s as the rate loop counts, in a
	// window freezes do not cut (default: the brake's freeze factor,
	// Config.FreezeFactor).
	Factor float64
	// Cut multiplies the scale on a cut (default 0.5); MinScale is the
	// least scale (default 1/16: a model 16x too fast is caught).
	Cut, MinScale float64
	// Cooldown: no second cut before the brake's window has seen the first
	// (default RateWindow).
	Cooldown time.Duration
	// Calm: after this long without a cut, with etcd within the limit,
	// the scale is raised by Raise (defaults 30 s and 1.25), up to 1: a
	// cut on a passing spike, or on etcd slowed by something else than
	// the stager, does not slow the rest of the window. Raising only
	// within the 1.3x promise was tried: a model understating the disk 4x
	// was cut to 1/16 and never raised, staging stalled
	// (brake-ext4-200MiB-2).
	Calm  time.Duration
	Raise float64
	// Deadline: past it the model goes back to scale 1 so staging
	// finishes (0: none; the guard's deadline).
	Deadline time.Duration
	// OthersMax: the largest share of the budget the other tenants may
	// need at the scale the brake sets (default 0.5; Sample.Others). A
	// cut that would take them past it is not made; past it already,
	// the scale goes back up 1/Cut a Cooldown, whatever etcd says: a
	// model cut below the host's needs throttles etcd too, and etcd's
	// latency then asked for every further cut down to 1/16.
	OthersMax float64
	// BooksSpan: the other tenants' share counts over at least this much
	// of the brake's window (default 1 s); where the books are read,
	// no cut before it: the kernel updates them once a period, and two
	// readings a tick apart showed a share of 0 (a cut at the first step).
	BooksSpan time.Duration
}

// WithDefaults fills zero fields; brake is the guard's freeze factor.
func (c ModelConfig) WithDefaults(brake float64) ModelConfig {
	if c.Factor == 0 {
		c.Factor = brake
	}
	if c.Cut == 0 {
		c.Cut = 0.5
	}
	if c.MinScale == 0 {
		c.MinScale = 1.0 / 16
	}
	if c.Cooldown == 0 {
		c.Cooldown = RateWindow
	}
	if c.Calm == 0 {
		c.Calm = 30 * time.Second
	}
	if c.Raise == 0 {
		c.Raise = 1.25
	}
	if c.OthersMax == 0 {
		c.OthersMax = 0.5
	}
	if c.BooksSpan == 0 {
		c.BooksSpan = time.Second
	}
	return c
}

// ModelOptions turn the model brake on: Set puts the staging disks'
// models at scale (0-1] of what the window started with.
type ModelOptions struct {
	Config ModelConfig
	Set    func(ctx context.Context, scale float64) error
}

// ModelState is the model brake's memory between steps.
type ModelState struct {
	Scale        float64
	Start, Last  time.Time // first step; last cut or raise
	LastCut      time.Time
	Cuts         int
	PastDeadline bool
}

// ModelDecision is one step's outcome: the scale, and etcd's numbers
// behind it (Congestion, as the rate loop reads them).
type ModelDecision struct {
	At         time.Time
	Scale      float64
	Changed    bool
	Cut        bool
	Reason     string
	Congestion RateDecision
	// Others is the other tenants' share of the budget it was judged on
	// (-1: unknown); OthersHold: a cut etcd asked for was not made for
	// them.
	Others     float64
	OthersHold bool
}

// LogAttrs are the decision's numbers as slog key/value pairs.
func (d ModelDecision) LogAttrs() []any {
	a := []any{"model_scale", round3(d.Scale), "reason", d.Reason}
	if d.Others >= 0 {
		a = append(a, "others_budget_share", round3(d.Others))
	}
	return d.Congestion.signalAttrs(a, "limit")
}

// StepModel is the model brake: a pure function of its state, the
// baseline and one input. It halves the scale when etcd is over the
// limit (once per Cooldown), raises it after Calm within the limit, and
// puts it back to 1 past the deadline.
func StepModel(cfg ModelConfig, base Baseline, st ModelState, in RateInput) (ModelState, ModelDecision) {
	now := in.Sample.At
	if st.Start.IsZero() {
		st = ModelState{Scale: 1, Start: now, Last: now}
	}
	// etcd's latency alone decides: the stall share and the device queue
	// count the stager's own waits.
	rc := RateConfig{Target: cfg.Factor, StallTarget: -1, QueueHold: -1}.WithDefaults()
	d, known := rc.congestion(base, in)
	md := ModelDecision{At: now, Congestion: d}
	// The other tenants' share, over the brake's window when there is one.
	judged := in.Sample
	if !in.Long.At.IsZero() {
		judged = in.Long
	}
	others := judged.Others
	if judged.Span < cfg.BooksSpan {
		others = -1
	}
	booksPending := judged.Books && others < 0
	md.Others = others
	old := st.Scale
	switch {
	case st.PastDeadline:
		md.Reason = "past the deadline: the model as the window started"
	case cfg.Deadline > 0 && now.Sub(st.Start) >= cfg.Deadline:
		st.PastDeadline, st.Scale = true, 1
		md.Reason = "deadline reached: the model back as the window started, so staging finishes"
	case others > cfg.OthersMax && st.Scale < 1 && now.Sub(st.Last) >= cfg.Cooldown:
		st.Scale = min(st.Scale/cfg.Cut, 1)
		st.Last = now
		md.Reason = "the other tenants need more than the brake leaves them: scaling the model back up"
	case others > cfg.OthersMax && st.Scale < 1:
		md.Reason = "the other tenants need more than the brake leaves them, but the last change has not shown yet"
	case !known:
		md.Reason = "no signal in the window: holding"
	case d.Congested && !st.LastCut.IsZero() && now.Sub(st.LastCut) < cfg.Cooldown:
		md.Reason = "over the limit, but the last cut has not shown yet"
	case d.Congested && st.Scale <= cfg.MinScale:
		md.Reason = "over the limit at the least scale: holding"
	case d.Congested && booksPending:
		md.Reason = "over the limit, but the other tenants' share is not known yet: holding"
	case d.Congested && others >= 0 && others/cfg.Cut > cfg.OthersMax:
		md.Reason = "over the limit, but a cut would leave the other tenants less than they use: holding"
		md.OthersHold = true
	case d.Congested:
		st.Scale = max(st.Scale*cfg.Cut, cfg.MinScale)
		st.LastCut, st.Last = now, now
		st.Cuts++
		md.Cut = true
		md.Reason = "etcd over the brake's limit: the model overstates the disk, scaling it down"
	case st.Scale >= 1 || now.Sub(st.Last) < cfg.Calm:
		md.Reason = "calm"
	case d.Silent || !d.Quiet:
		md.Reason = "within chance of the limit, not within it: holding"
	default:
		st.Scale = min(st.Scale*cfg.Raise, 1)
		st.Last = now
		md.Reason = "calm for a while: scaling the model back up"
	}
	md.Scale, md.Changed = st.Scale, st.Scale != old
	return st, md
}

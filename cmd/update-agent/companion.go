package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/txn"
)

// companionPoll is how often companion mode looks at rpm-ostree's
// transaction: a staging takes minutes, and each look is an rpm-ostree
// status (a process and a D-Bus round trip to rpm-ostreed).
const companionPoll = 5 * time.Second

// companionTriggerEvery is how often the trigger (rpm-ostreed's cgroup)
// is read, and companionTriggerLook the least time between two looks it
// starts while rpm-ostreed keeps writing with no transaction found.
const (
	companionTriggerEvery = 250 * time.Millisecond
	companionTriggerLook  = time.Second
)

// companionStatusTimeout bounds one look: while the guard has rpm-ostreed
// frozen, status waits for the thaw (at most guard.max_freeze).
const companionStatusTimeout = 2 * time.Minute

// companionMode: the agent drives nothing but paces every
// deployment-writing transaction (staging.pace_foreign).
func companionMode(cfg *config.Config) bool {
	return cfg.Staging.PaceForeign && !cfg.Updates.Enabled
}

// foreignPacer is the stager's PaceForeign (*adapters.Stager).
type foreignPacer interface {
	PaceForeign(ctx context.Context, t stage.Foreign, ended <-chan struct{}) (stage.Report, error)
}

// transactionReader reads rpm-ostree's status (*rpmostree.Client).
type transactionReader interface {
	Status(ctx context.Context) (*rpmostree.Status, error)
}

// triggerReader samples rpm-ostreed's cgroup (*cgroupTrigger).
type triggerReader interface {
	Sample(ctx context.Context) (triggerSample, error)
	String() string
}

// companion opens the staging window around each deployment-writing
// transaction rpm-ostreed runs (txn.DecideForeign), from the first look
// that sees it to the first that does not. It looks every poll, and at
// once when the trigger says rpm-ostreed started writing.
type companion struct {
	status transactionReader
	pacer  foreignPacer
	every  time.Duration
	// trigger, when set, is read every triggerEvery (0:
	// companionTriggerEvery); a look it starts follows the last by
	// triggerLook at least (0: companionTriggerLook).
	trigger      triggerReader
	triggerEvery time.Duration
	triggerLook  time.Duration
	clock        clockwork.Clock // nil: the real one
	log          *slog.Logger
	// done, when set, is told how each window went (metrics).
	done func(stage.Report, error)
}

// run polls until ctx ends; a window open then is undone before it
// returns (the transaction itself goes on).
func (c *companion) run(ctx context.Context) {
	every := c.every
	if every <= 0 {
		every = companionPoll
	}
	trigEvery, trigLook := c.triggerEvery, c.triggerLook
	if trigEvery <= 0 {
		trigEvery = companionTriggerEvery
	}
	if trigLook <= 0 {
		trigLook = companionTriggerLook
	}
	clk := c.clock
	if clk == nil {
		clk = clockwork.NewRealClock()
	}
	var (
		paced  *rpmostree.Transaction // the window's, nil: none open
		ended  chan struct{}
		result chan error
		// skip is a transaction whose window failed to open: not retried
		// every poll (an ErrBusy is: the host's own staging ends).
		skip     *rpmostree.Transaction
		armed    bool // the first status look is done (logged once)
		statusOK = true
		// idle: the last look saw nothing to pace, so the trigger may
		// start one (while a transaction is known the poll follows it).
		idle     = true
		lastLook time.Time
		prev     triggerSample
		trigTick clockwork.Ticker // nil until the first look
		trigC    <-chan time.Time
		trigErr  bool
	)
	closeWindow := func(why string) {
		close(ended)
		if err := <-result; err != nil {
			c.log.Warn("companion mode: the foreign transaction's window", "method", paced.Method, "err", err)
		}
		c.log.Debug("companion mode: window closed", "method", paced.Method, "why", why)
		paced = nil
	}
	defer func() {
		if paced != nil {
			closeWindow("agent stopping")
		}
	}()
	trigAttrs := []any{"trigger", "none"}
	if c.trigger != nil {
		trigAttrs = []any{"trigger", "rpm-ostreed's dirty page cache", "trigger_file", c.trigger.String(),
			"trigger_seconds", trigEvery.Seconds()}
		if cl, ok := c.trigger.(interface{ Close() }); ok {
			defer cl.Close()
		}
	}
	c.log.Info("companion mode: pacing every rpm-ostree transaction that writes a deployment, whoever started it",
		append([]any{"poll_seconds", every.Seconds()}, trigAttrs...)...)
	// The first look after one interval, the trigger's too: the engine's
	// recovery at its start takes the staging lock too, and a window
	// holding it would fail that (ErrBusy: retried, but logged as a
	// failure).
	t := clk.NewTimer(every)
	defer t.Stop()
	defer func() {
		if trigTick != nil {
			trigTick.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		case <-trigC:
			cur, err := c.trigger.Sample(ctx)
			if err != nil {
				if !trigErr {
					c.log.Warn("companion mode: the trigger is unreadable; the poll alone finds transactions", "err", err)
					trigErr = true
				}
				continue
			}
			look := idle && triggerWriting(prev, cur) && clk.Since(lastLook) >= trigLook
			prev = cur
			if !look {
				continue
			}
			c.log.Debug("companion mode: rpm-ostreed writes: looking now", "dirty_bytes", cur.Pending)
		}
		t.Reset(every)
		lastLook = clk.Now()
		if trigTick == nil && c.trigger != nil {
			trigTick = clk.NewTicker(trigEvery)
			trigC = trigTick.Chan()
		}
		if paced != nil {
			select {
			case err := <-result: // the window ended on its own: it failed
				if errors.Is(err, stage.ErrBusy) {
					// This host stages (stage-once): its window paces the
					// transaction; looked at again every poll, quietly.
					c.log.Debug("companion mode: the host's own staging holds the window", "method", paced.Method, "err", err)
				} else {
					c.log.Warn("companion mode: not pacing the foreign transaction", "method", paced.Method, "sender", paced.Sender, "err", err)
					skip = paced
				}
				paced = nil
			default:
			}
		}
		sctx, cancel := context.WithTimeout(ctx, companionStatusTimeout)
		st, err := c.status.Status(sctx)
		cancel()
		if err != nil {
			// The window stays: the transaction most likely still runs.
			if statusOK && ctx.Err() == nil {
				c.log.Warn("companion mode: reading rpm-ostree's transaction", "err", err)
			}
			statusOK = false
			continue
		}
		statusOK = true
		if !armed {
			// Said once: a harness (the latency bench) starts its
			// transaction after it, as a companion running long before one.
			armed = true
			c.log.Info("companion mode: armed: first look at rpm-ostree's transaction done", "trigger", c.trigger != nil)
		}
		active := st.Transaction
		if skip != nil && (active == nil || *active != *skip) {
			skip = nil
		}
		idle = txn.DecideForeign(active, nil) != txn.ForeignOpen
		switch txn.DecideForeign(active, paced) {
		case txn.ForeignOpen:
			if skip != nil {
				continue
			}
			paced, ended, result = active, make(chan struct{}), make(chan error, 1)
			go func(tx rpmostree.Transaction, ended <-chan struct{}, result chan<- error) {
				rep, err := c.pacer.PaceForeign(ctx, stage.Foreign{Method: tx.Method, Sender: tx.Sender, Path: tx.Path}, ended)
				if c.done != nil {
					c.done(rep, err)
				}
				result <- err
			}(*active, ended, result)
		case txn.ForeignClose:
			closeWindow("transaction gone")
			if txn.DecideForeign(active, nil) == txn.ForeignOpen {
				t.Reset(0) // another one took its place: at once
			}
		}
	}
}

package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/txn"
)

// companionPoll is how often companion mode looks at rpm-ostree's
// transaction: a staging takes minutes, and each look is an rpm-ostree
// status (a process and a D-Bus round trip to rpm-ostreed).
const companionPoll = 5 * time.Second

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

// companion opens the staging window around each deployment-writing
// transaction rpm-ostreed runs (txn.DecideForeign), from the first look
// that sees it to the first that does not.
type companion struct {
	status transactionReader
	pacer  foreignPacer
	every  time.Duration
	log    *slog.Logger
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
	var (
		paced  *rpmostree.Transaction // the window's, nil: none open
		ended  chan struct{}
		result chan error
		// skip is a transaction whose window failed to open: not retried
		// every poll (an ErrBusy is: the host's own staging ends).
		skip     *rpmostree.Transaction
		statusOK = true
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
	c.log.Info("companion mode: pacing every rpm-ostree transaction that writes a deployment, whoever started it",
		"poll_seconds", every.Seconds())
	// The first look after one interval: the engine's recovery at its
	// start takes the staging lock too, and a window holding it would
	// fail that (ErrBusy: retried, but logged as a failure).
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(every)
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
		active := st.Transaction
		if skip != nil && (active == nil || *active != *skip) {
			skip = nil
		}
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

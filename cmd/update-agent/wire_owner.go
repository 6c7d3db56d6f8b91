package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/owner"
	"github.com/update-agent/update-agent/agent/systemd"
)

// ownerRecheck is how often the daemon looks again at bootc's updater: an
// admin may enable or unmask it while the agent runs.
const ownerRecheck = time.Minute

// ownerStartTimeout bounds the look at start, well inside systemd's start
// timeout.
const ownerStartTimeout = 15 * time.Second

// fenceOwners refuses to run while bootc's own updater can reboot the host
// (owner.ErrForeignUpdater: exit 79), or masks it with the operator's
// consent (updates.mask_bootc_timer). Without systemd's bus it cannot
// tell and says so; watchOwners keeps trying (nothing stages without the
// bus either: the staging unit is systemd's).
func (a *agent) fenceOwners(ctx context.Context) error {
	// Bounded: READY must not wait on a bus that does not answer.
	ctx, cancel := context.WithTimeout(ctx, ownerStartTimeout)
	defer cancel()
	conn, err := systemd.Dial(ctx)
	if err == nil {
		defer conn.Close()
		err = a.fenceWith(ctx, conn)
		if !errors.Is(err, owner.ErrUnreadable) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	a.log.Warn("cannot look at bootc's updater yet; trying again every minute", "err", err)
	return nil
}

func (a *agent) fenceWith(ctx context.Context, u owner.Units) error {
	v, err := owner.Fence(ctx, u, a.cfg.Updates.MaskBootcTimer)
	if v.Mask {
		var names []string
		for _, l := range v.Live {
			names = append(names, l.Name+" ("+l.UnitFileState+", "+l.ActiveState+")")
		}
		if err == nil {
			a.log.Warn("masked bootc's own updater until the next boot: it would reboot the host without a reboot slot (updates.mask_bootc_timer = true)",
				"units", strings.Join(names, ", "))
		}
	}
	if err != nil {
		return err
	}
	return v.Err
}

// watchOwners looks at bootc's updater every ownerRecheck until ctx ends; a
// refusal stops the daemon with it (stop's cause), as at start.
func (a *agent) watchOwners(ctx context.Context, stop context.CancelCauseFunc) {
	t := time.NewTicker(ownerRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		conn, err := systemd.Dial(ctx)
		if err != nil {
			a.log.Debug("looking at bootc's updater", "err", err)
			continue
		}
		err = a.fenceWith(ctx, conn)
		conn.Close()
		switch {
		case isForeignUpdater(err):
			a.log.Error("stopping: "+err.Error(), "err", err)
			stop(err)
			return
		case err != nil && ctx.Err() == nil:
			a.log.Warn("looking at bootc's updater", "err", err)
		}
	}
}

// describeOwners is doctor's "bootc updater" line. Without systemd on the
// system bus (not a host the daemon runs on) it says it could not look.
func describeOwners(ctx context.Context, cfg *config.Config) (string, error) {
	conn, err := systemd.Dial(ctx)
	if err != nil {
		return "not checked: " + err.Error(), nil
	}
	defer conn.Close()
	us, err := owner.Read(ctx, conn)
	if err != nil {
		return "", err
	}
	return owner.Describe(us, cfg.Updates.MaskBootcTimer)
}

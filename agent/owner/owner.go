// Package owner finds the other owners of a host's updates that would
// reboot it behind the agent's back, and says what the agent does about
// them: refuse to run, or fence them out with the operator's consent.
package owner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/update-agent/update-agent/agent/systemd"
)

// BootcUnits are bootc's own updater, enabled by default on Fedora and
// CentOS bootc images: the timer runs `bootc upgrade --apply`, which
// unlocks a download-only staged deployment and reboots at once
// (bootc-dev/bootc, systemd/bootc-fetch-apply-updates.service; bootc PR
// #1831): no slot, no quorum check, no fence.
var BootcUnits = []string{"bootc-fetch-apply-updates.timer", "bootc-fetch-apply-updates.service"}

// ErrForeignUpdater: another updater can reboot the host on its own
// schedule. Like another update driver, restarting does not change that.
var ErrForeignUpdater = errors.New("another updater can reboot this host")

// ErrUnreadable: systemd did not say what state the units are in (no
// systemd on the bus); the caller cannot tell, and tries again.
var ErrUnreadable = errors.New("cannot read the units' state")

// Live reports whether u can run: enabled (in any form but masked,
// disabled or static-without-trigger) or active now.
func Live(u systemd.UnitFile) bool {
	if u.LoadState == "not-found" || u.LoadState == "masked" || strings.HasPrefix(u.UnitFileState, "masked") {
		return false
	}
	switch u.ActiveState {
	case "active", "activating", "reloading", "deactivating":
		return true
	}
	switch u.UnitFileState {
	case "enabled", "enabled-runtime", "linked", "linked-runtime", "alias", "indirect", "generated", "transient":
		return true
	}
	return false
}

// Verdict is what the agent does about the host's other updaters.
type Verdict struct {
	// Live are the units that can reboot the host behind the agent.
	Live []systemd.UnitFile
	// Mask: the operator consented (updates.mask_bootc_timer): mask
	// them until the next boot. Otherwise Err refuses to run.
	Mask bool
	Err  error
}

// Decide is the pure rule: no live unit, nothing to do; live units with
// the operator's consent are masked; without it the agent refuses.
func Decide(units []systemd.UnitFile, consent bool) Verdict {
	var v Verdict
	for _, u := range units {
		if Live(u) {
			v.Live = append(v.Live, u)
		}
	}
	switch {
	case len(v.Live) == 0:
	case consent:
		v.Mask = true
	default:
		v.Err = &ForeignUpdaterError{Units: v.Live}
	}
	return v
}

// ForeignUpdaterError names the live units and the two ways out.
type ForeignUpdaterError struct{ Units []systemd.UnitFile }

func (e *ForeignUpdaterError) Error() string {
	var states []string
	for _, u := range e.Units {
		states = append(states, fmt.Sprintf("%s (%s, %s)", u.Name, u.UnitFileState, u.ActiveState))
	}
	names := slices.Sorted(slices.Values(BootcUnits))
	return fmt.Sprintf("bootc's own updater can reboot this host into a staged update with no reboot slot: %s; "+
		"run `systemctl mask --now %s`, or set updates.mask_bootc_timer = true to have the agent mask it until each next boot, "+
		"then `systemctl restart update-agent`", strings.Join(states, ", "), strings.Join(names, " "))
}

func (e *ForeignUpdaterError) Is(target error) bool { return target == ErrForeignUpdater }

// Units reads unit states (systemd.Conn.UnitFile).
type Units interface {
	UnitFile(ctx context.Context, unit string) (systemd.UnitFile, error)
	MaskRuntime(ctx context.Context, units ...string) error
}

// Read reads the state of bootc's updater units.
func Read(ctx context.Context, c Units) ([]systemd.UnitFile, error) {
	var us []systemd.UnitFile
	for _, n := range BootcUnits {
		u, err := c.UnitFile(ctx, n)
		if err != nil {
			return nil, err
		}
		us = append(us, u)
	}
	return us, nil
}

// Fence reads the units, decides, and masks them when consented. It
// returns the verdict (its Err: refuse to run) and an error when the units
// could not be read or masked.
func Fence(ctx context.Context, c Units, consent bool) (Verdict, error) {
	us, err := Read(ctx, c)
	if err != nil {
		return Verdict{}, fmt.Errorf("reading bootc's updater units: %w: %w", ErrUnreadable, err)
	}
	v := Decide(us, consent)
	if v.Mask {
		var names []string
		for _, u := range v.Live {
			names = append(names, u.Name)
		}
		// Both, even if only one is live: the timer triggers the service.
		if err := c.MaskRuntime(ctx, BootcUnits...); err != nil {
			return v, fmt.Errorf("masking %s (updates.mask_bootc_timer): %w", strings.Join(names, ", "), err)
		}
		// A unit file in /etc/systemd/system outranks a mask in /run:
		// what counts is what systemd says now.
		us, err := Read(ctx, c)
		if err != nil {
			return v, fmt.Errorf("reading bootc's updater units after masking them: %w", err)
		}
		if after := Decide(us, false); after.Err != nil {
			return v, fmt.Errorf("masked %s until the next boot, but systemd still shows it live (a unit file in /etc/systemd/system "+
				"outranks a runtime mask: mask it there for good): %w", strings.Join(names, ", "), after.Err)
		}
	}
	return v, nil
}

// Describe is doctor's line for bootc's updater: what it found and what the
// daemon does about it; an error is a refusal (the daemon would exit 79).
func Describe(units []systemd.UnitFile, consent bool) (string, error) {
	v := Decide(units, consent)
	var states []string
	for _, u := range units {
		st := u.UnitFileState
		if st == "" {
			st = u.LoadState
		}
		states = append(states, fmt.Sprintf("%s %s, %s", u.Name, st, u.ActiveState))
	}
	switch {
	case v.Err != nil:
		return "", v.Err
	case v.Mask:
		return strings.Join(states, "; ") + ": the daemon masks them until each next boot (updates.mask_bootc_timer = true)", nil
	}
	return strings.Join(states, "; ") + ": nothing else reboots this host on a schedule", nil
}

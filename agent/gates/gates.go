// Package gates holds a node's reboot while the cluster is in trouble:
// active etcd alarms, firing alerts, failing operator commands, a reboot of
// the same group released too recently. Evaluate is the pure decision; the
// other files gather its inputs (etcd, Alertmanager, commands) and Checker
// puts them together for the engine, which asks before the drain hooks and
// again right before finalize.
//
// A gate that cannot be evaluated holds: an unreachable Alertmanager or a
// command that timed out is not a green light.
package gates

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Gate names, as they appear in logs, status and doctor.
const (
	GateAlarms   = "etcd-alarms"
	GateAlerts   = "alerts"
	GateCommand  = "command"
	GateSpacing  = "spacing"
	GateBootDone = "boot-complete"
)

// Alarm is one active etcd alarm.
type Alarm struct {
	Member string // member name, or its hex ID when unknown
	Type   string // NOSPACE, CORRUPT
}

// Alert is one alert as Alertmanager's API v2 returns it.
type Alert struct {
	Name        string
	State       string // active, suppressed, unprocessed
	SilencedBy  []string
	InhibitedBy []string
}

// CommandResult is how one gate command ended.
type CommandResult struct {
	Argv     []string
	ExitCode int // -1: did not start, killed or timed out
	TimedOut bool
	Err      error // set for any failure; nil means exit 0
}

// Spacing is what etcd says of the group's previous reboot.
type Spacing struct {
	// Active is true while the previous holder's release is younger than
	// lock.min_interval (its marker's lease is alive).
	Active bool
	By     string // node that released
	Left   time.Duration
}

// Inputs is everything the gates decide from. A zero Err field with
// nothing listed means the gate is clear; a disabled gate is left zero.
type Inputs struct {
	// AlarmsEnabled is false only on a host without etcd.
	AlarmsEnabled bool
	Alarms        []Alarm
	AlarmsErr     error

	AlertsEnabled bool
	Alerts        []Alert
	AlertsErr     error
	// AlertRegexp selects the alerts that block; nil means every firing
	// alert blocks.
	AlertRegexp *regexp.Regexp

	Commands []CommandResult

	SpacingEnabled bool
	Spacing        Spacing
	SpacingErr     error
}

// Result is one gate's verdict.
type Result struct {
	Gate   string `json:"gate"`
	Hold   bool   `json:"hold"`
	Reason string `json:"reason"`
	// Unknown: the gate could not be evaluated (an unreachable
	// Alertmanager, a command that did not start or timed out); it holds
	// all the same. doctor tells this (broken) from a gate that holds
	// (waiting).
	Unknown bool `json:"unknown,omitempty"`
}

// Evaluate returns one result per evaluated gate, in a fixed order.
func Evaluate(in Inputs) []Result {
	var out []Result
	if in.AlarmsEnabled {
		out = append(out, alarms(in))
	}
	if in.AlertsEnabled {
		out = append(out, alerts(in))
	}
	for _, c := range in.Commands {
		out = append(out, command(c))
	}
	if in.SpacingEnabled {
		out = append(out, spacing(in))
	}
	return out
}

// Holding reports whether any result holds, and why (every holding reason,
// joined), for the engine's wait reason.
func Holding(rs []Result) (bool, string) {
	var why []string
	for _, r := range rs {
		if r.Hold {
			why = append(why, r.Gate+": "+r.Reason)
		}
	}
	return len(why) > 0, strings.Join(why, "; ")
}

func alarms(in Inputs) Result {
	r := Result{Gate: GateAlarms}
	switch {
	case in.AlarmsErr != nil:
		r.Hold, r.Unknown, r.Reason = true, true, fmt.Sprintf("cannot list etcd alarms: %v", in.AlarmsErr)
	case len(in.Alarms) > 0:
		var s []string
		for _, a := range in.Alarms {
			s = append(s, a.Type+" on "+a.Member)
		}
		r.Hold, r.Reason = true, "active etcd alarm: "+strings.Join(s, ", ")
	default:
		r.Reason = "no active etcd alarm"
	}
	return r
}

// firing is Alertmanager's notion: active and neither silenced nor
// inhibited.
func firing(a Alert) bool {
	return a.State == "active" && len(a.SilencedBy) == 0 && len(a.InhibitedBy) == 0
}

func alerts(in Inputs) Result {
	r := Result{Gate: GateAlerts}
	if in.AlertsErr != nil {
		r.Hold, r.Unknown, r.Reason = true, true, fmt.Sprintf("cannot read alerts: %v", in.AlertsErr)
		return r
	}
	var names []string
	seen := map[string]bool{}
	for _, a := range in.Alerts {
		if !firing(a) || (in.AlertRegexp != nil && !in.AlertRegexp.MatchString(a.Name)) || seen[a.Name] {
			continue
		}
		seen[a.Name] = true
		names = append(names, a.Name)
	}
	if len(names) > 0 {
		r.Hold, r.Reason = true, "firing: "+strings.Join(names, ", ")
		return r
	}
	r.Reason = "no matching alert firing"
	return r
}

func command(c CommandResult) Result {
	r := Result{Gate: GateCommand}
	argv := strings.Join(c.Argv, " ")
	switch {
	case c.TimedOut:
		r.Hold, r.Unknown, r.Reason = true, true, fmt.Sprintf("%s: timed out", argv)
	case c.Err != nil && c.ExitCode < 0:
		r.Hold, r.Unknown, r.Reason = true, true, fmt.Sprintf("%s: %v", argv, c.Err)
	case c.Err != nil:
		r.Hold, r.Reason = true, fmt.Sprintf("%s: %v", argv, c.Err)
	default:
		r.Reason = argv + ": exit 0"
	}
	return r
}

func spacing(in Inputs) Result {
	r := Result{Gate: GateSpacing}
	switch {
	case in.SpacingErr != nil:
		r.Hold, r.Unknown, r.Reason = true, true, fmt.Sprintf("cannot read the group's last release: %v", in.SpacingErr)
	case in.Spacing.Active:
		r.Hold, r.Reason = true, fmt.Sprintf("%s released its reboot slot recently; next reboot of the group in %s (lock.min_interval)",
			in.Spacing.By, in.Spacing.Left.Round(time.Second))
	default:
		r.Reason = "no reboot of the group within lock.min_interval"
	}
	return r
}

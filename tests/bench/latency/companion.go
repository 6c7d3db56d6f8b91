package latency

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// CompanionScenario is companion mode (issue #44): the staging is a plain
// `rpm-ostree upgrade`, as zincati, the MCO's daemon or an admin starts it
// (b-naive's), with the agent's daemon beside it pacing every
// deployment-writing transaction with its defaults' window. The upgrade
// starts once the daemon is armed (its first look done, its trigger on),
// as a companion running long before a transaction, but young: with no
// rolling latency baseline yet, so its window is the unit policy, memory
// bound and iocost without the latency guard (a foreign window never
// learns: the transaction already writes). Against b-naive it is what a
// young companion buys etcd; against d-agent, what finding the
// transaction from outside costs (within a second of rpm-ostreed's first
// writes, on its cgroup's trigger, or at a 5 s poll) and the guard's
// absence.
var CompanionScenario = Scenario{ID: "f-companion", Stager: Companion}

// CompanionMatureScenario is CompanionScenario with the daemon armed for
// 150 s before the upgrade: its rolling baseline kept (readings at 0, 60
// and 120 s), its window adopts it and paces with the guard, as on a host
// where the companion has run for a while.
var CompanionMatureScenario = Scenario{ID: "f-companion-mature", Stager: Companion, CompanionWarm: 150 * time.Second}

// companionUnit runs the daemon for a Companion scenario: a transient
// unit, since the packaged one only starts on an ostree-booted host and
// the plain guest is not one.
const companionUnit = "bench-companion.service"

// companionConfig goes over the bench's base (agentBase) for a Companion
// scenario: updates off and pace_foreign on, and the lock on, which the
// daemon requires beside a local etcd member (etcd.local_unit); it takes
// no slot, since it reboots nothing.
const companionConfig = `[updates]
enabled = false
[staging]
pace_foreign = true
[lock]
enabled = true
group = "bench"
[etcd]
endpoints = ["http://127.0.0.1:2379"]
`

// Log lines of the daemon's that the scenario waits for (cmd/update-agent
// companion.go, agent/stage/foreign.go).
const (
	companionUp     = "companion mode: pacing every rpm-ostree transaction"
	companionArmed  = "companion mode: armed"
	companionClosed = "foreign transaction's staging window closed"
)

// stageCompanion starts the agent's daemon in companion mode, waits until
// it is armed (its first look, one poll after its start), runs b-naive's `rpm-ostree upgrade` outside it between the stamps
// t0 and t1, then waits for the daemon to close the window and stops it
// (SIGTERM: it restores anything left).
func stageCompanion(ctx context.Context, g Guest, l Layout, s Scenario, t0, t1 string) (Window, error) {
	for name, body := range map[string]string{"50-bench.toml": l.agentBase(), "55-companion.toml": companionConfig, "60-scenario.toml": s.AgentConfig} {
		if body == "" {
			continue
		}
		if err := writeFile(ctx, g, "/etc/update-agent/config.d/"+name, body); err != nil {
			return Window{}, err
		}
	}
	log := l.stageLog()
	defer sh(context.WithoutCancel(ctx), g, "systemctl stop "+companionUnit+" 2>/dev/null; systemctl reset-failed "+companionUnit+" 2>/dev/null; true")
	if _, err := sh(ctx, g, "mkdir -p "+l.Scratch+"; rm -f "+log+"; systemd-run -q --unit="+companionUnit+
		" -p KillMode=mixed -p StandardOutput=append:"+log+" -p StandardError=append:"+log+" /usr/bin/update-agent daemon"); err != nil {
		return Window{}, fmt.Errorf("starting the agent in companion mode: %w", err)
	}
	for _, line := range []string{companionUp, companionArmed} {
		if err := waitLog(ctx, g, log, line, time.Minute); err != nil {
			return Window{}, err
		}
	}
	if s.CompanionWarm > 0 {
		select {
		case <-ctx.Done():
			return Window{}, ctx.Err()
		case <-time.After(s.CompanionWarm):
		}
	}
	upLog := l.Scratch + "/bench-upgrade.log"
	out, err := sh(ctx, g, t0+`; rpm-ostree upgrade >`+upLog+` 2>&1 || { cat `+upLog+` >&2; exit 1; }; `+t1+`; echo $t0 $t1`)
	if err != nil {
		return Window{}, fmt.Errorf("staging (rpm-ostree upgrade beside the companion): %w", err)
	}
	w, err := parseWindow(out)
	if err != nil {
		return Window{}, err
	}
	if err := waitLog(ctx, g, log, companionClosed, 2*time.Minute); err != nil {
		return Window{}, err
	}
	closed, err := sh(ctx, g, "grep -F "+q(companionClosed)+" "+log+" | tail -n 1")
	if err != nil {
		return Window{}, err
	}
	w.Summary = strings.TrimSpace(closed)
	if _, err := sh(ctx, g, "systemctl stop "+companionUnit); err != nil {
		return Window{}, fmt.Errorf("stopping the companion: %w", err)
	}
	return w, nil
}

// waitLog waits until the guest's file log has a line containing text.
func waitLog(ctx context.Context, g Guest, log, text string, limit time.Duration) error {
	_, err := sh(ctx, g, fmt.Sprintf("for i in $(seq 1 %d); do grep -qF %s %s && exit 0; sleep 1; done; tail -n 30 %s >&2; exit 1",
		int(limit.Seconds()), q(text), log, log))
	if err != nil {
		return fmt.Errorf("waiting for the agent's %q: %w", text, err)
	}
	return nil
}

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/state"
)

// status shows the pending announcements and each gate's last verdict
// (both were in the daemon's answer and dropped on the screen).
func TestPrintStatusPendingAndGates(t *testing.T) {
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	r := statusReport{
		Node: "cp1", Version: "1.0", Strategy: "immediate",
		Engine: engine.Snapshot{State: state.State{Phase: state.HoldingSlot, Since: now.Add(-time.Minute)},
			OS: engine.OSStatus{Booted: engine.Deployment{Checksum: "aaaa"}}},
		Lock: &lockReport{Group: "control-plane", Slots: 1, Pending: []lock.Announcement{
			{Node: "cp2", Member: "etcd-2", Target: "bbbbbbbbbbbbbbbbbbbb", AnnouncedAt: now.Add(-5 * time.Minute)},
			{Node: "w1", Target: "cccc", AnnouncedAt: now.Add(-time.Minute)},
		}},
		Gates: &gatesReport{At: now.Add(-30 * time.Second), Results: []gates.Result{
			{Gate: "etcd-alarms", Reason: "no active etcd alarm"},
			{Gate: "alerts", Hold: true, Reason: "firing: EtcdMembersDown"},
		}},
	}
	var b bytes.Buffer
	printStatus(&b, r, now)
	out := b.String()
	for _, want := range []string{
		"Pending update:  cp2 (etcd member etcd-2): bbbbbbbbbbbb, announced ",
		"Pending update:  w1: cccc, announced ",
		"Reboot gate:     etcd-alarms open: no active etcd alarm (checked ",
		"Reboot gate:     alerts HOLDS: firing: EtcdMembersDown (checked ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// The last staging's pacing gets its own line: how the window paced, and
// each disk's iocost model source.
func TestPrintStatusPacing(t *testing.T) {
	now := time.Date(2026, 12, 6, 15, 0, 0, 0, time.UTC)
	r := statusReport{Node: "cp1", Version: "1.0", Strategy: "immediate",
		Engine: engine.Snapshot{State: state.State{Phase: state.Staged, Since: now.Add(-time.Minute)}},
		Staging: &engine.StagingReport{At: now.Add(-2 * time.Minute), Seconds: 130, OK: true, Guarded: true, Freezes: 3,
			Pacing: "iocost (vda learned)"}}
	var b bytes.Buffer
	printStatus(&b, r, now)
	if !strings.Contains(b.String(), "Pacing:         iocost (vda learned)") {
		t.Errorf("status lacks the pacing line:\n%s", b.String())
	}
}

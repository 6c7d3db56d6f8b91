package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/metrics"
	"github.com/update-agent/update-agent/agent/state"
)

// failingCheck is the world whose checks for updates fail.
type failingCheck struct{ *world }

func (failingCheck) Check(context.Context) (*state.Target, error) {
	return nil, errors.New("no route to the remote")
}

// runUntilWaiting runs one engine until it first waits (after its first
// check) and returns the agent's real metrics it reported to.
func runUntilWaiting(t *testing.T, os OS, w *world, disk Store, clock *clockwork.FakeClock) *metrics.Metrics {
	t.Helper()
	m := metrics.New("test")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := New(Options{
		OS: os, Stager: w, Lock: w, Cluster: w, Hooks: w, Store: disk,
		BootID: func() (string, error) { return w.bootID, nil },
		Policy: testPolicy(), Clock: clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m,
		Rand: func() float64 { return 0.5 },
	})
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("engine never waited: %v", err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return m
}

func gauge(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not in the registry", name)
	return 0
}

func TestCheckSetsLastCheckGauge(t *testing.T) {
	w := newWorld()
	w.booted = w.available.Checksum // up to date: the check finds nothing
	clock := clockwork.NewFakeClockAt(t0)
	m := runUntilWaiting(t, w, w, &memDisk{}, clock)
	if got := gauge(t, m, "update_agent_last_check_success_timestamp_seconds"); got != float64(t0.Unix()) {
		t.Errorf("last check = %v, want %v", got, t0.Unix())
	}
	if got := gauge(t, m, "update_agent_state_change_timestamp_seconds"); got != float64(t0.Unix()) {
		t.Errorf("state change = %v, want %v", got, t0.Unix())
	}

	w = newWorld()
	m = runUntilWaiting(t, failingCheck{w}, w, &memDisk{}, clockwork.NewFakeClockAt(t0))
	if got := gauge(t, m, "update_agent_last_check_success_timestamp_seconds"); got != 0 {
		t.Errorf("last check = %v after a failed check, want 0", got)
	}
}

func TestSetAsideGauge(t *testing.T) {
	w := newWorld()
	disk := &memDisk{}
	since := t0.Add(-time.Hour)
	if err := disk.Save(state.State{Phase: state.Idle, Since: since, NextCheck: t0.Add(time.Hour), Failures: map[string]state.Failure{
		"older": {Count: 3, SetAside: true}, "other": {Count: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	m := runUntilWaiting(t, w, w, disk, clockwork.NewFakeClockAt(t0))
	if got := gauge(t, m, "update_agent_targets_set_aside"); got != 1 {
		t.Errorf("set aside = %v, want 1", got)
	}
	// The record's Since, not the restart: a node stuck before a restart
	// is still stuck after it.
	if got := gauge(t, m, "update_agent_state_change_timestamp_seconds"); got != float64(since.Unix()) {
		t.Errorf("state change = %v, want %v", got, since.Unix())
	}
}

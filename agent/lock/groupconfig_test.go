package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/lock"
)

// TestStatusUsesRecordedSlots: agents of a group with 2 slots queue three
// nodes; `lock status` run where lock.slots is 1 (another group's host, or
// a stale configuration) still shows two holders, because the agents
// recorded their count in etcd when they queued.
func TestStatusUsesRecordedSlots(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 30*time.Second)
	for _, n := range []string{"a", "b"} {
		l := f.lock(f.opts(n, 2, 30*time.Second, ""))
		defer l.Close()
		if _, err := l.Acquire(ctx, "t1", nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, group := range []string{"", "workers"} {
		st, err := lock.Status(ctx, f.cli, "/update-agent", 1, group, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != 1 || st[0].Slots != 2 || st[0].SlotsBy != "agent a" || len(st[0].Holders) != 2 {
			t.Fatalf("status (group %q) read where lock.slots = 1: %+v", group, st)
		}
	}
	// A group nobody recorded (older agents) falls back to the local count.
	if _, err := f.cli.Delete(ctx, lock.GroupConfigKey("/update-agent", "workers")); err != nil {
		t.Fatal(err)
	}
	st, err := lock.Status(ctx, f.cli, "/update-agent", 1, "", time.Now())
	if err != nil || len(st) != 1 || st[0].Slots != 1 || st[0].SlotsBy != "" || len(st[0].Holders) != 1 {
		t.Fatalf("status without a recorded count: %+v, %v", st, err)
	}
}

func TestDecideSlots(t *testing.T) {
	by := func(n int, w string) lock.GroupConfig { return lock.GroupConfig{Slots: n, By: w} }
	for _, tc := range []struct {
		name  string
		own   int
		rec   lock.GroupConfig
		found bool
		want  lock.SlotsDecision
	}{
		{"nothing recorded", 2, lock.GroupConfig{}, false, lock.SlotsDecision{Slots: 2, Record: true}},
		{"unreadable", 2, by(0, "agent b"), true, lock.SlotsDecision{Slots: 2, Record: true}},
		{"same count", 2, by(2, "agent b"), true, lock.SlotsDecision{Slots: 2}},
		{"our own older record", 2, by(1, "agent a"), true, lock.SlotsDecision{Slots: 2, Record: true}},
		{"another's smaller count: take it, keep it", 2, by(1, "agent b"), true,
			lock.SlotsDecision{Slots: 1, Disagree: true}},
		{"another's larger count: ours, narrow the record", 1, by(3, "agent b"), true,
			lock.SlotsDecision{Slots: 1, Disagree: true, Record: true}},
		{"a FleetLock server's larger count", 1, by(2, "fleetlock server"), true,
			lock.SlotsDecision{Slots: 1, Disagree: true, Record: true}},
	} {
		if got := lock.DecideSlots(tc.own, "agent a", tc.rec, tc.found); got != tc.want {
			t.Errorf("%s: DecideSlots(%d, %+v) = %+v, want %+v", tc.name, tc.own, tc.rec, got, tc.want)
		}
	}
}

func TestSlotsDisagreement(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	g := lock.GroupStatus{Group: "workers", Slots: 1, SlotsBy: "agent a", SlotsAt: at}
	if got := lock.SlotsDisagreement(g, 2); !strings.Contains(got, "this host's is 2, agent a recorded 1 at 2026-12-01T10:00:00Z") ||
		!strings.Contains(got, "lock.slots") {
		t.Errorf("disagreement: %q", got)
	}
	for _, g := range []lock.GroupStatus{
		{Group: "workers", Slots: 2, SlotsBy: "agent a"},  // agrees
		{Group: "workers", Slots: 1},                      // nobody recorded: the local count
		{Group: lock.MembersGroup, Slots: 1, SlotsBy: ""}, // always one
	} {
		if got := lock.SlotsDisagreement(g, 2); got != "" {
			t.Errorf("%+v: %q, want none", g, got)
		}
	}
}

// TestDisagreeingSlots: a host configured with lock.slots = 2 in a group
// whose other host recorded 1 warns, naming both counts, the other writer
// and the key, and takes no more than 1 slot: it waits while a holds.
// Whichever started first: a wider host that recorded first follows the
// narrower record at its next acquisition.
func TestDisagreeingSlots(t *testing.T) {
	key := lock.GroupConfigKey("/update-agent", "workers")
	waits := func(t *testing.T, l *lock.Lock) {
		t.Helper()
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if pos, err := l.Acquire(wctx, "t1", nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the wider host was not held back: %+v, %v", pos, err)
		}
	}
	warned := func(t *testing.T, f *fixture, want int) {
		t.Helper()
		log := f.buf.String()
		if n := strings.Count(log, "disagree on lock.slots"); n != want {
			t.Fatalf("%d disagreement warning(s), want %d; log:\n%s", n, want, log)
		}
		for _, s := range []string{"lock_slots=2", "recorded_slots=1", `recorded_by="agent a"`, "recorded_at=", "key=" + key, "using_slots=1"} {
			if !strings.Contains(log, s) {
				t.Fatalf("warning lacks %s; log:\n%s", s, log)
			}
		}
	}
	t.Run("narrower first", func(t *testing.T) {
		f := newFixture(t)
		ctx := ctxT(t, 30*time.Second)
		a := f.lock(f.opts("a", 1, 30*time.Second, ""))
		defer a.Close()
		if _, err := a.Acquire(ctx, "t1", nil); err != nil {
			t.Fatal(err)
		}
		b := f.lock(f.opts("b", 2, 30*time.Second, ""))
		defer b.Close()
		waits(t, b)
		warned(t, f, 1)
		st, err := lock.Status(ctx, f.cli, "/update-agent", 2, "workers", time.Now())
		if err != nil || len(st) != 1 || st[0].Slots != 1 || st[0].SlotsBy != "agent a" || len(st[0].Holders) != 1 {
			t.Fatalf("the narrower record was widened: %+v, %v", st, err)
		}
	})
	t.Run("wider first", func(t *testing.T) {
		f := newFixture(t)
		ctx := ctxT(t, 30*time.Second)
		b := f.lock(f.opts("b", 2, 30*time.Second, ""))
		defer b.Close()
		if _, err := b.Acquire(ctx, "t1", nil); err != nil {
			t.Fatal(err)
		}
		a := f.lock(f.opts("a", 1, 30*time.Second, ""))
		defer a.Close()
		got := make(chan error, 1)
		go func() { _, err := a.Acquire(ctx, "t1", nil); got <- err }()
		// a queues behind b, records 1 and waits; b's release hands a
		// the slot, and b queued again behind a waits for it.
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(f.buf.String(), "disagree on lock.slots") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		waits(t, b)
		warned(t, f, 2)
	})
}

// TestAgreeingSlotsNoWarning: hosts with one lock.slots hold side by side
// and nothing is flagged.
func TestAgreeingSlotsNoWarning(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 30*time.Second)
	for _, n := range []string{"a", "b"} {
		l := f.lock(f.opts(n, 2, 30*time.Second, ""))
		defer l.Close()
		if _, err := l.Acquire(ctx, "t1", nil); err != nil {
			t.Fatal(err)
		}
	}
	if log := f.buf.String(); strings.Contains(log, "disagree") {
		t.Fatalf("agreeing hosts warned; log:\n%s", log)
	}
	st, err := lock.Status(ctx, f.cli, "/update-agent", 2, "workers", time.Now())
	if err != nil || len(st) != 1 || lock.SlotsDisagreement(st[0], 2) != "" || len(st[0].Holders) != 2 {
		t.Fatalf("status: %+v, %v", st, err)
	}
}

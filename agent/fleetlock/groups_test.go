package fleetlock_test

import (
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/lock"
)

// TestWorkerGroupOnEveryServer: two agents' servers over one etcd serve
// the agents' group (1 slot) and a zincati-only group "workers" (2
// slots). Workers take turns among themselves, not in the agents' slot;
// a worker granted through one server is released through the other (any
// agent answers: the semaphore is in etcd), and the next worker then gets
// its slot from either.
func TestWorkerGroupOnEveryServer(t *testing.T) {
	f := newFixture(t, 1)
	o := f.opts(1)
	o.Groups = []string{"default", "workers"}
	o.GroupSlots = map[string]int{"workers": 2}
	_, a := f.server(o)
	_, b := f.server(o)

	cp := f.lock("cp1", 1)
	defer cp.Close()
	if _, err := cp.Acquire(t.Context(), "t1", nil); err != nil {
		t.Fatalf("the agent's slot: %v", err)
	}
	for i, w := range []struct{ src, id, base string }{
		{"127.0.0.21", "w1", a.URL}, {"127.0.0.22", "w2", b.URL},
	} {
		if ans := postFrom(t, w.src, w.base, "/v1/pre-reboot", w.id, "workers"); !ans.ok() {
			t.Fatalf("worker %d (%s) not granted while the agents' only slot is held: %+v", i+1, w.id, ans)
		}
	}
	if ans := postFrom(t, "127.0.0.23", a.URL, "/v1/pre-reboot", "w3", "workers"); ans.ok() || ans.Kind != "failed_lock_semaphore_full" {
		t.Fatalf("third worker with 2 worker slots: %+v", ans)
	}
	if ans := postFrom(t, "127.0.0.24", b.URL, "/v1/pre-reboot", "z1", "default"); ans.ok() {
		t.Fatalf("a zincati client of the agents' group got a slot while cp1 holds its only one")
	}
	if ans := postFrom(t, "127.0.0.25", a.URL, "/v1/pre-reboot", "x1", "elsewhere"); ans.ok() || ans.Kind != "unknown_group" {
		t.Fatalf("a group nobody serves: %+v", ans)
	}
	// w1 took its slot through a; it comes back and reports through b.
	if ans := postFrom(t, "127.0.0.21", b.URL, "/v1/steady-state", "w1", "workers"); !ans.ok() {
		t.Fatalf("w1's steady-state through the other server: %+v", ans)
	}
	if ans := postFrom(t, "127.0.0.23", b.URL, "/v1/pre-reboot", "w3", "workers"); !ans.ok() {
		t.Fatalf("w3 after w1 released: %+v", ans)
	}
}

// TestStatusReadsGroupSlots: `lock status` on a host whose lock.slots is 1
// shows both holders of a FleetLock group served with 2 slots as holders,
// and the agents' group with the count its agents use: each group's count
// is the one its users recorded in etcd, not the reader's.
func TestStatusReadsGroupSlots(t *testing.T) {
	f := newFixture(t, 1)
	o := f.opts(3)
	o.Groups = []string{"default", "workers"}
	o.GroupSlots = map[string]int{"workers": 2}
	s, a := f.server(o)
	if err := s.TendOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ src, id string }{{"127.0.0.21", "w1"}, {"127.0.0.22", "w2"}, {"127.0.0.23", "w3"}} {
		postFrom(t, w.src, a.URL, "/v1/pre-reboot", w.id, "workers")
	}
	st, err := lock.Status(t.Context(), f.cli, prefix, 1, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Group != "workers" {
		t.Fatalf("status: %+v", st)
	}
	if g := st[0]; g.Slots != 2 || g.SlotsBy != "fleetlock server" || len(g.Holders) != 2 || len(g.Waiters) != 1 {
		t.Fatalf("workers read with the local lock.slots = 1: slots %d by %q, holders %v, waiters %v",
			g.Slots, g.SlotsBy, names(g.Holders), names(g.Waiters))
	}
	one, err := lock.Status(t.Context(), f.cli, prefix, 1, "workers", time.Now())
	if err != nil || len(one) != 1 || one[0].Slots != 2 || len(one[0].Holders) != 2 {
		t.Fatalf("status --group workers: %+v, %v", one, err)
	}
}

package fleetlock_test

import (
	"testing"
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

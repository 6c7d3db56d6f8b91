package coord

import (
	"testing"
	"time"
)

func put(key string, create, mod int64, acq bool) QueueEvent {
	v := `{"node":"x"}`
	if acq {
		v = `{"node":"x","acquired_at":"2026-12-02T12:00:00Z"}`
	}
	return QueueEvent{Key: key, CreateRevision: create, ModRevision: mod, Value: []byte(v)}
}

func del(key string) QueueEvent { return QueueEvent{Key: key, Delete: true} }

func TestAuditQueue(t *testing.T) {
	// Two slots; a, b, c, d queue in that order.
	fair := []QueueEvent{
		put("a", 1, 1, false), put("b", 2, 2, false), put("c", 3, 3, false), put("d", 4, 4, false),
		put("a", 1, 5, true), put("b", 2, 6, true),
		del("a"), put("c", 3, 8, true),
		del("b"), put("d", 4, 10, true),
		put("d", 4, 11, true), // a rewrite of a held record is no new grant
		del("c"), del("d"),
	}
	a := AuditQueue(fair, 2)
	if a != (QueueAudit{Enqueued: 4, Grants: 4, MaxHolders: 2, Unentitled: 0}) {
		t.Errorf("fair run: %+v", a)
	}
	// d takes a slot while a and b still hold: a third holder, out of order.
	unfair := []QueueEvent{
		put("a", 1, 1, false), put("b", 2, 2, false), put("c", 3, 3, false), put("d", 4, 4, false),
		put("a", 1, 5, true), put("b", 2, 6, true), put("d", 4, 7, true),
	}
	a = AuditQueue(unfair, 2)
	if a.MaxHolders != 3 || a.Unentitled != 1 || a.Grants != 3 {
		t.Errorf("unfair run: %+v", a)
	}
}

func TestHandOffs(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	grants := []time.Time{at(0), at(1), at(130), at(240), at(260)}
	releases := []time.Time{at(100), at(200), at(250)}
	got := HandOffs(releases, grants, 2, at(0))
	want := []time.Duration{30 * time.Millisecond, 40 * time.Millisecond, 10 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("hand-off %d = %v, want %v", i, got[i], want[i])
		}
	}
	// Releases before the whole fleet queued are not hand-offs.
	if got := HandOffs(releases, grants, 2, at(150)); len(got) != 2 {
		t.Errorf("with waitersFrom: %v", got)
	}
}

func TestQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 50, 0.99: 99, 1: 100, 0: 1} {
		if got := Quantile(ds, q); got != want {
			t.Errorf("q%v = %v, want %v", q, got, want)
		}
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("empty")
	}
}

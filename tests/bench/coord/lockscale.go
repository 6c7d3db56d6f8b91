// Package coord measures the reboot coordination at scale on real embedded
// etcd (loopback only): the lock with a fleet's worth of sessions, and
// rolling reboots of a 3-member cluster. The measurements run from tests
// under the "bench" build tag (make bench); this file holds the pure
// bookkeeping, unit-tested on its own.
package coord

import (
	"encoding/json"
	"sort"
	"time"
)

// QueueEvent is one change of a lock group's holders/ keys as seen by a
// watcher, in revision order.
type QueueEvent struct {
	Key            string
	Delete         bool
	CreateRevision int64
	ModRevision    int64
	Value          []byte
}

// acquired reports whether a holder record carries acquired_at: the write
// lock.Acquire makes when the node takes its slot.
func acquired(v []byte) bool {
	var r struct {
		AcquiredAt time.Time `json:"acquired_at"`
	}
	return json.Unmarshal(v, &r) == nil && !r.AcquiredAt.IsZero()
}

// QueueAudit is what the event stream of a lock group proves, independent of
// what the clients believe.
type QueueAudit struct {
	Enqueued int
	Grants   int
	// MaxHolders is the largest number of keys marked acquired at once.
	MaxHolders int
	// Unentitled counts grants made while Slots or more keys created earlier
	// were still queued: a node that overtook the FIFO order (or a slot
	// that did not exist).
	Unentitled int
}

// AuditQueue replays events (in revision order) against the semaphore's rule:
// a node may hold only while fewer than slots keys were created before it.
func AuditQueue(events []QueueEvent, slots int) QueueAudit {
	var a QueueAudit
	alive := map[string]int64{} // key -> CreateRevision
	held := map[string]bool{}
	for _, e := range events {
		if e.Delete {
			delete(alive, e.Key)
			delete(held, e.Key)
			continue
		}
		if _, ok := alive[e.Key]; !ok {
			a.Enqueued++
		}
		alive[e.Key] = e.CreateRevision
		if held[e.Key] || !acquired(e.Value) {
			continue
		}
		a.Grants++
		earlier := 0
		for _, rev := range alive {
			if rev < e.CreateRevision {
				earlier++
			}
		}
		if earlier >= slots {
			a.Unentitled++
		}
		held[e.Key] = true
		a.MaxHolders = max(a.MaxHolders, len(held))
	}
	return a
}

// HandOffs pairs the k-th grant with the release that freed its slot (the
// (k-slots)-th release, both in time order) and returns the delays. Grants
// before waitersFrom (when the whole fleet was queued) are skipped: before
// that a slot could be free with nobody waiting.
func HandOffs(releases, grants []time.Time, slots int, waitersFrom time.Time) []time.Duration {
	r := append([]time.Time(nil), releases...)
	g := append([]time.Time(nil), grants...)
	sort.Slice(r, func(i, j int) bool { return r[i].Before(r[j]) })
	sort.Slice(g, func(i, j int) bool { return g[i].Before(g[j]) })
	var out []time.Duration
	for k := slots; k < len(g) && k-slots < len(r); k++ {
		if r[k-slots].Before(waitersFrom) {
			continue
		}
		out = append(out, g[k].Sub(r[k-slots]))
	}
	return out
}

// Quantile is the nearest-rank quantile of ds (0 for none).
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

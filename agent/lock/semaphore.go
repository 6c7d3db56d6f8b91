package lock

import (
	"sort"
	"time"
)

// Entry is one key in a group's queue, as needed to decide who holds.
type Entry struct {
	Node           string
	CreateRevision int64
}

// Position is where a node stands in its group's queue.
type Position struct {
	Holder bool
	// Index is the 0-based place in FIFO order among all entries.
	Index int
	// Ahead is how many waiters are ahead of this node (0 for a holder).
	Ahead int
	// Queued is the number of entries (holders and waiters).
	Queued int
	Slots  int
}

// Order sorts entries by CreateRevision (FIFO), node name breaking ties that
// cannot happen in etcd but can in a test table.
func Order(entries []Entry) []Entry {
	out := append([]Entry(nil), entries...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].CreateRevision != out[j].CreateRevision {
			return out[i].CreateRevision < out[j].CreateRevision
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// Locate says whether node holds one of slots slots: it does while fewer than
// slots entries were created before it. ok is false when node is not queued.
func Locate(entries []Entry, slots int, node string) (pos Position, ok bool) {
	ordered := Order(entries)
	for i, e := range ordered {
		if e.Node != node {
			continue
		}
		pos = Position{Index: i, Queued: len(ordered), Slots: slots, Holder: i < slots}
		if !pos.Holder {
			pos.Ahead = i - max(slots, 0)
		}
		return pos, true
	}
	return Position{Queued: len(ordered), Slots: slots}, false
}

// Split returns the holders and the waiters, each in FIFO order.
func Split(entries []Entry, slots int) (holders, waiters []Entry) {
	ordered := Order(entries)
	n := min(max(slots, 0), len(ordered))
	return ordered[:n], ordered[n:]
}

// Record is the value of a holders/<node> key.
type Record struct {
	Node       string    `json:"node"`
	BootID     string    `json:"boot_id"`
	Target     string    `json:"target"`
	Member     string    `json:"member,omitempty"`
	QueuedAt   time.Time `json:"queued_at"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
}

// Announcement is the value of a pending/<node> key.
type Announcement struct {
	Node        string    `json:"node"`
	Member      string    `json:"member,omitempty"`
	Target      string    `json:"target"`
	AnnouncedAt time.Time `json:"announced_at"`
}

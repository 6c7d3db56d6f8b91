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
	// Queued is the number of entries (holders and waiters). A waiter
	// counts it down from its one read; entries queued since are behind it
	// and not watched, so it can be low while waiting.
	Queued int
	Slots  int
}

// Order sorts entries by CreateRevision (FIFO), node name breaking ties that
// cannot happen in etcd but can in a test table.
func Order(entries []Entry) []Entry {
	out := append([]Entry(nil), entries...)
	sort.SliceStable(out, func(i, j int) bool { return before(out[i], out[j]) })
	return out
}

// before is the queue order: a before b.
func before(a, b Entry) bool {
	if a.CreateRevision != b.CreateRevision {
		return a.CreateRevision < b.CreateRevision
	}
	return a.Node < b.Node
}

// Locate says whether node holds one of slots slots: it does while fewer than
// slots entries were created before it. ok is false when node is not queued.
func Locate(entries []Entry, slots int, node string) (pos Position, ok bool) {
	ordered := Order(entries)
	for i, e := range ordered {
		if e.Node != node {
			continue
		}
		return PositionAt(i, len(ordered), slots), true
	}
	return Position{Queued: len(ordered), Slots: slots}, false
}

// PositionAt is the position of a node that has earlier entries created
// before its own in a queue of queued entries.
func PositionAt(earlier, queued, slots int) Position {
	pos := Position{Index: earlier, Queued: queued, Slots: slots, Holder: earlier < slots}
	if !pos.Holder {
		pos.Ahead = earlier - max(slots, 0)
	}
	return pos
}

// AfterDeletion is how a waiter moves without re-reading the queue. A waiter
// whose key was created at mine, with earlier keys created before it, sees
// the key of deleted (node and CreateRevision, from the delete event's
// previous value) removed. Keys created after the waiter's read can only
// queue behind it, so deletions are the only events that move it: one fewer
// earlier key when the deleted one was created before its own. ok is false
// when the event cannot be counted: its previous value is missing
// (CreateRevision 0), it is the waiter's own key, or the count would go
// negative (it was wrong); the caller then reads the queue again.
func AfterDeletion(mine Entry, earlier int, deleted Entry) (next int, ok bool) {
	switch {
	case deleted.CreateRevision <= 0, deleted.Node == mine.Node:
		return earlier, false
	case !before(deleted, mine):
		return earlier, true
	case earlier <= 0:
		return earlier, false
	}
	return earlier - 1, true
}

// Record is the value of a holders/<node> key.
type Record struct {
	Node       string    `json:"node"`
	BootID     string    `json:"boot_id"`
	Target     string    `json:"target"`
	Member     string    `json:"member,omitempty"`
	MachineID  string    `json:"machine_id,omitempty"`
	QueuedAt   time.Time `json:"queued_at"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
	// Kind is "" for an agent and KindFleetLock for a FleetLock client
	// (package fleetlock), which asked over HTTP and has no lease of its
	// own; older records have no kind.
	Kind string `json:"kind,omitempty"`
	// LastSeen is when a FleetLock client last asked for its slot.
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// Announcement is the value of a pending/<node> key.
type Announcement struct {
	Node        string    `json:"node"`
	Member      string    `json:"member,omitempty"`
	MachineID   string    `json:"machine_id,omitempty"`
	Target      string    `json:"target"`
	AnnouncedAt time.Time `json:"announced_at"`
}

package fleetlock

import (
	"fmt"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/lock"
)

// Action is what a server does with a queue entry's lease.
type Action int

const (
	// Ignore: not a FleetLock entry (an agent keeps its own lease).
	Ignore Action = iota
	// Keep: keep the entry's lease alive.
	Keep
	// ExpireHold: the client held its slot for max_hold; revoke.
	ExpireHold
	// ExpireWait: the client stopped asking for QueueHold; revoke.
	ExpireWait
)

func (a Action) String() string {
	return [...]string{"ignore", "keep", "expire_hold", "expire_wait"}[a]
}

// Timer is the state of an entry's timer lease, as etcd reports it.
type Timer int

const (
	NoTimer Timer = iota // none recorded (an older server's entry)
	Running
	Expired
)

// Timers are an entry's hold timer (TTL max_hold from the grant) and wait
// timer (TTL QueueHold from the client's last request).
type Timers struct{ Hold, Seen Timer }

// Tend decides the fate of one queue entry. A granted entry (AcquiredAt
// set) lives while its hold timer runs; any other FleetLock entry while
// its wait timer runs, so a client that went away frees its place. The
// timers are etcd leases, so servers with different clocks agree. Only an
// entry of an older server, with no timer, is judged by the times it
// wrote and this server's clock now.
func Tend(rec lock.Record, t Timers, now time.Time, maxHold, queueHold time.Duration) Action {
	if rec.Kind != lock.KindFleetLock {
		return Ignore
	}
	if !rec.AcquiredAt.IsZero() {
		switch {
		case t.Hold == Running:
			return Keep
		case t.Hold == Expired, now.Sub(rec.AcquiredAt) >= maxHold:
			return ExpireHold
		}
		return Keep
	}
	switch t.Seen {
	case Running:
		return Keep
	case Expired:
		return ExpireWait
	}
	seen := rec.LastSeen
	if seen.IsZero() {
		seen = rec.QueuedAt
	}
	if now.Sub(seen) >= queueHold {
		return ExpireWait
	}
	return Keep
}

// Answer is the answer to a pre-reboot whose entry stands at pos (found:
// the entry was in the queue read), with the group's spacing as read for an
// entry not granted yet: nil grants the slot.
func Answer(pos lock.Position, found bool, group string, spacing lock.SpacingState) *Error {
	switch {
	case !found:
		return errorf(KindFailedLock, "queue entry vanished while locking (released by an operator, or expired); try again")
	case pos.Holder && spacing.Active:
		return errorf(KindMinInterval, "%s released its reboot slot of group %s less than lock.min_interval ago; "+
			"next reboot of the group in %s, place kept while you keep asking", spacing.By, group, spacing.Left.Round(time.Second))
	case pos.Holder:
		return nil
	}
	return errorf(KindSemaphoreFull, "all %d slot(s) of group %s are held; %d client(s) ahead in line, place kept while you keep asking",
		pos.Slots, group, pos.Ahead)
}

// endpointLabel names an endpoint in metrics and logs.
func endpointLabel(path string) string {
	switch {
	case strings.HasSuffix(path, PathPreReboot):
		return "pre-reboot"
	case strings.HasSuffix(path, PathSteadyState):
		return "steady-state"
	}
	return "other"
}

// expiryMessage says why an entry was dropped, for the log.
func expiryMessage(a Action, maxHold, queueHold time.Duration) string {
	if a == ExpireHold {
		return fmt.Sprintf("held longer than fleetlock.max_hold (%s) without steady-state", maxHold)
	}
	return fmt.Sprintf("client did not ask again within %s", queueHold)
}

package fleetlock

import (
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/lock"
)

func TestTend(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	const maxHold, queueHold = 2 * time.Hour, 15 * time.Minute
	fl := func(queued, seen, acquired time.Duration) lock.Record {
		r := lock.Record{Node: "fleetlock:a", Kind: lock.KindFleetLock, QueuedAt: t0.Add(queued)}
		if seen != 0 {
			r.LastSeen = t0.Add(seen)
		}
		if acquired != 0 {
			r.AcquiredAt = t0.Add(acquired)
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		rec    lock.Record
		timers Timers
		now    time.Duration // after t0
		want   Action
	}{
		// The timers are etcd's: this server's clock, hours off, does not
		// count.
		{"holder, hold timer running, clock far ahead", fl(0, time.Minute, time.Minute), Timers{Hold: Running}, 10 * time.Hour, Keep},
		{"holder, hold timer expired, clock behind", fl(0, time.Minute, time.Minute), Timers{Hold: Expired}, -10 * time.Hour, ExpireHold},
		{"waiter, wait timer running, clock far ahead", fl(0, 0, 0), Timers{Seen: Running}, 10 * time.Hour, Keep},
		{"waiter, wait timer expired", fl(0, 0, 0), Timers{Seen: Expired}, 0, ExpireWait},
		{"holder, only its wait timer expired", fl(0, time.Minute, time.Minute), Timers{Hold: Running, Seen: Expired}, time.Hour, Keep},
		// Entries of older servers, without timers: the clock, as they did.
		{"agent entry", lock.Record{Node: "n1", QueuedAt: t0}, Timers{}, 10 * time.Hour, Ignore},
		{"waiter just queued", fl(0, 0, 0), Timers{}, time.Minute, Keep},
		{"waiter never asked again", fl(0, 0, 0), Timers{}, queueHold, ExpireWait},
		{"waiter asked lately", fl(0, 20*time.Minute, 0), Timers{}, 30 * time.Minute, Keep},
		{"waiter stopped asking", fl(0, 20*time.Minute, 0), Timers{}, 35 * time.Minute, ExpireWait},
		{"holder inside max_hold", fl(0, time.Minute, time.Minute), Timers{}, time.Minute + maxHold - time.Second, Keep},
		{"holder at max_hold", fl(0, time.Minute, time.Minute), Timers{}, time.Minute + maxHold, ExpireHold},
		// A granted client does not ask again while it reboots: max_hold,
		// not its silence, bounds it.
		{"holder silent while rebooting", fl(0, time.Minute, time.Minute), Timers{}, time.Hour, Keep},
		{"holder asking does not extend", fl(0, 3*time.Hour, time.Minute), Timers{}, 3 * time.Hour, ExpireHold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Tend(tc.rec, tc.timers, t0.Add(tc.now), maxHold, queueHold); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pos     lock.Position
		found   bool
		spacing lock.SpacingState
		want    Kind
		value   string
	}{
		{"holder", lock.PositionAt(0, 3, 1), true, lock.SpacingState{}, KindOK, ""},
		{"second of two slots", lock.PositionAt(1, 3, 2), true, lock.SpacingState{}, KindOK, ""},
		{"waiter", lock.PositionAt(2, 3, 1), true, lock.SpacingState{}, KindSemaphoreFull, "1 client(s) ahead"},
		{"vanished", lock.Position{}, false, lock.SpacingState{}, KindFailedLock, "vanished"},
		{"holder within min_interval", lock.PositionAt(0, 3, 1), true, lock.SpacingState{Active: true, By: "cp1", Left: 42 * time.Second},
			KindMinInterval, "cp1 released its reboot slot of group default less than lock.min_interval ago; next reboot of the group in 42s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, value := KindOK, ""
			if e := Answer(tc.pos, tc.found, "default", tc.spacing); e != nil {
				got, value = e.Kind, e.Value
			}
			if got != tc.want || !strings.Contains(value, tc.value) {
				t.Fatalf("got %s %q, want %s %q", got, value, tc.want, tc.value)
			}
		})
	}
}

func TestEndpointLabel(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/pre-reboot": "pre-reboot", "/base/v1/pre-reboot": "pre-reboot",
		"/v1/steady-state": "steady-state", "/": "other", "/v1/pre-reboot/x": "other",
	} {
		if got := endpointLabel(path); got != want {
			t.Errorf("%s: got %s, want %s", path, got, want)
		}
	}
}

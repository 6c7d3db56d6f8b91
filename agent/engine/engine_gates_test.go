package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// gatedHost is the reboot gates and the host at once: it records what the
// engine asked, in order, against the world's state at that moment.
type gatedHost struct {
	w         *world
	mu        sync.Mutex
	holds     int // Hold answers "hold" this many times first
	bootWaits int // BootComplete answers false this many times first
	// Once told: Hold answers "hold" this many times (a gate closing
	// during the logged-in delay), and LoggedIn answers sessions this
	// many times (-1: always), then 0.
	holdsAfterNotice, sessions, sessionAnswers int
	told                                       bool
	onLoggedIn                                 func()          // runs at the first LoggedIn
	clock                                      clockwork.Clock // stamps calls (nil: not stamped)
	calls                                      []string
	at                                         []time.Time
}

func (g *gatedHost) note(s string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, s)
	if g.clock != nil {
		g.at = append(g.at, g.clock.Now())
	}
}

func (g *gatedHost) Hold(context.Context) (bool, string) {
	g.mu.Lock()
	hold := g.holds > 0 || (g.told && g.holdsAfterNotice > 0)
	if g.holds > 0 {
		g.holds--
	} else if g.told && g.holdsAfterNotice > 0 {
		g.holdsAfterNotice--
	}
	g.mu.Unlock()
	if hold {
		g.note("hold?:held")
		return true, "alerts: firing: EtcdMembersDown"
	}
	g.note("hold?")
	return false, ""
}

func (g *gatedHost) LoggedIn(context.Context) (int, error) {
	g.note("logged-in?")
	g.mu.Lock()
	f := g.onLoggedIn
	g.onLoggedIn = nil
	g.mu.Unlock()
	if f != nil {
		f()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sessionAnswers == 0 {
		return 0, nil
	}
	if g.sessionAnswers > 0 {
		g.sessionAnswers--
	}
	return g.sessions, nil
}

func (g *gatedHost) Rebooted(context.Context) error { g.note("spacing"); return nil }

func (g *gatedHost) Announce(_ context.Context, target string) error {
	g.w.mu.Lock()
	holding, finalizes := g.w.holding(), g.w.finalizes
	g.w.mu.Unlock()
	if !holding || finalizes != 0 {
		g.note("announce out of place")
	}
	g.note("announce " + target)
	g.mu.Lock()
	g.told = true
	g.mu.Unlock()
	return nil
}

func (g *gatedHost) Unannounce() error { g.note("unannounce"); return nil }

func (g *gatedHost) BootComplete(context.Context) (bool, error) {
	g.note("boot-complete?")
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.bootWaits > 0 {
		g.bootWaits--
		return false, nil
	}
	return true, nil
}

// TestGatesAndHostInTheCycle: a holding gate delays the drain, the people
// on the host are told right before the finalize, the release waits for
// boot-complete.target and then starts the group's spacing.
func TestGatesAndHostInTheCycle(t *testing.T) {
	h := newHarness(t)
	g := &gatedHost{w: h.w, holds: 2, bootWaits: 2}
	h.gates, h.host = g, g
	h.untilDone()
	h.checkEnd()
	calls := strings.Join(g.calls, ",")
	if n := strings.Count(calls, "hold?"); n < 4 {
		t.Errorf("gates asked %d times, want 2 holds then before the hooks and before finalize: %s", n, calls)
	}
	if strings.Count(calls, "announce "+tgt.Checksum) != 1 || strings.Contains(calls, "out of place") || strings.Contains(calls, "unannounce") {
		t.Errorf("users must be told once, holding the slot, right before the finalize: %s", calls)
	}
	if strings.Count(calls, "boot-complete?") != 3 {
		t.Errorf("want 2 pending answers then complete: %s", calls)
	}
	last := g.calls[len(g.calls)-1]
	if last != "spacing" || strings.Count(calls, "spacing") != 1 {
		t.Errorf("the release after the reboot must start the spacing, once, last: %s", calls)
	}
	if i, j := slices.Index(g.calls, "announce "+tgt.Checksum), slices.Index(g.calls, "boot-complete?"); i > j {
		t.Errorf("announced after the reboot: %s", calls)
	}
}

// TestNoticeThenDelayThenLastChecks (issue 18): the people on the host are
// told first; while users stay logged in the reboot waits up to
// reboot.logged_in_delay; only then come the last gate and quorum checks,
// the fence and the finalize, so a gate closing during the delay holds the
// reboot and the fence is not made stale by the wait.
func TestNoticeThenDelayThenLastChecks(t *testing.T) {
	const delay = time.Minute
	for _, tc := range []struct {
		name                      string
		sessionAnswers, gateHolds int
		minWait                   time.Duration // from the notice to the fence
		wantLoggedInAsks          int
	}{
		{name: "users stay: the whole delay", sessionAnswers: -1, minWait: delay, wantLoggedInAsks: 6},
		{name: "users log out: sooner", sessionAnswers: 2, minWait: 20 * time.Second, wantLoggedInAsks: 3},
		{name: "a gate closes during the delay: held past it", sessionAnswers: -1, gateHolds: 9, minWait: 90 * time.Second, wantLoggedInAsks: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.pol.LoggedInDelay = delay
			h.step = h.pol.RecheckInterval
			g := &gatedHost{w: h.w, clock: h.clock, sessions: 2, sessionAnswers: tc.sessionAnswers, holdsAfterNotice: tc.gateHolds}
			h.gates, h.host = g, g
			h.w.note = g.note
			h.untilDone()
			h.checkEnd()
			calls := strings.Join(g.calls, ",")
			told := slices.Index(g.calls, "announce "+tgt.Checksum)
			fence := slices.Index(g.calls, "fence")
			final := slices.Index(g.calls, "finalize")
			if told < 0 || fence < told || final != fence+1 || strings.Count(calls, "fence") != 1 {
				t.Fatalf("want the notice, then the fence right before the finalize: %s", calls)
			}
			if n := strings.Count(calls, "logged-in?"); n != tc.wantLoggedInAsks || slices.Index(g.calls, "logged-in?") < told {
				t.Errorf("asked for logged-in users %d times, want %d, after the notice: %s", n, tc.wantLoggedInAsks, calls)
			}
			if waited := g.at[fence].Sub(g.at[told]); waited < tc.minWait {
				t.Errorf("fenced %s after the notice, want >= %s: %s", waited, tc.minWait, calls)
			}
			// The last checks come after the wait: the gate asked last
			// before the fence is open, asked after any hold and at or
			// after the end of the wait.
			lastOpen, lastHold := -1, -1
			for i, c := range g.calls[:fence] {
				switch c {
				case "hold?":
					lastOpen = i
				case "hold?:held":
					lastHold = i
				}
			}
			if lastOpen < lastHold || g.at[lastOpen].Sub(g.at[told]) < tc.minWait {
				t.Errorf("want the last gate check (open) after the wait and any hold, before the fence: %s", calls)
			}
			if tc.gateHolds > 0 && (lastHold < told || strings.Count(calls, "hold?:held") != tc.gateHolds) {
				t.Errorf("the gate closed during the delay must hold the reboot %d times: %s", tc.gateHolds, calls)
			}
		})
	}
}

// TestNoticeTakenBackWhenTheSlotGoes: the slot lost during the logged-in
// delay (a lease expired) means no reboot now: the notice is taken back, the
// node queues again and tells again before its reboot.
func TestNoticeTakenBackWhenTheSlotGoes(t *testing.T) {
	h := newHarness(t)
	h.pol.LoggedInDelay = time.Minute
	h.step = h.pol.RecheckInterval
	g := &gatedHost{w: h.w, clock: h.clock, sessions: 1, sessionAnswers: -1, onLoggedIn: h.w.expireLeases}
	h.gates, h.host = g, g
	h.w.note = g.note
	h.untilDone()
	h.checkEnd()
	var seq []string
	for _, c := range g.calls {
		if strings.HasPrefix(c, "announce") || c == "unannounce" || c == "fence" || c == "finalize" {
			seq = append(seq, c)
		}
	}
	want := []string{"announce " + tgt.Checksum, "unannounce", "announce " + tgt.Checksum, "fence", "finalize"}
	if !slices.Equal(seq, want) {
		t.Errorf("got %v, want %v (all: %s)", seq, want, strings.Join(g.calls, ","))
	}
}

package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
)

// gatedHost is the reboot gates and the host at once: it records what the
// engine asked, in order, against the world's state at that moment.
type gatedHost struct {
	w         *world
	mu        sync.Mutex
	holds     int // Hold answers "hold" this many times first
	bootWaits int // BootComplete answers false this many times first
	calls     []string
}

func (g *gatedHost) note(s string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, s)
}

func (g *gatedHost) Hold(context.Context) (bool, string) {
	g.note("hold?")
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holds > 0 {
		g.holds--
		return true, "alerts: firing: EtcdMembersDown"
	}
	return false, ""
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

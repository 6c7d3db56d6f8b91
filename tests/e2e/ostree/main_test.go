//go:build e2e || e2e_ostree

// Package ostree runs in the ostree-booted test guest (guest.Options.Ostree):
// it boots a real ostree deployment, and ostree's own staging, finalization
// lock and shutdown finalization decide what boots next, with the launcher
// following the default boot entry across reboots like a bootloader.
//
// With -tags e2e (make e2e, make check): the agent's whole cycle on it
// (TestOstreeAgentCycle). With -tags e2e_ostree (make e2e-ostree): ostree's
// own CLI and the rpm-ostree stand-in alone on it, then the guest with an
// XFS physical root and a throttled root disk (TestOstreeXFSRoot).
package ostree

import (
	"context"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/update-agent/update-agent/tests/guest"
)

// One ostree guest at a time for the package's tests: each boot costs
// minutes, and two guests would share the host's cores.
var shared struct {
	mu      sync.Mutex
	started bool
	opts    guest.Options
	g       *guest.Guest
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.g != nil {
		shared.g.Stop()
	}
	os.Exit(code)
}

func ostreeGuest(t *testing.T) *guest.Guest {
	t.Helper()
	return ostreeGuestWith(t, guest.Options{Ostree: true})
}

// ostreeGuestWith returns the package's guest booted with opts, stopping
// one booted with other options first. A failed boot fails every caller
// with the same options with the same error instead of booting again.
func ostreeGuestWith(t *testing.T, opts guest.Options) *guest.Guest {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.started || shared.opts != opts {
		if shared.g != nil {
			shared.g.Stop()
		}
		shared.started, shared.opts = true, opts
		shared.g, shared.err = guest.Start(context.Background(), opts)
	}
	if shared.err != nil {
		t.Fatalf("ostree guest: %v", shared.err)
	}
	return shared.g
}

// booted is what actually booted: the deployment the kernel command line's
// ostree= points to, and the one `ostree admin status` marks with "*".
func booted(t *testing.T, g *guest.Guest) (fromCmdline, fromStatus string) {
	t.Helper()
	out := g.MustRun(t, `readlink -f "$(tr ' ' '\n' </proc/cmdline | sed -n 's/^ostree=//p')"`)
	fromCmdline = strings.TrimSuffix(path.Base(strings.TrimSpace(out)), ".0")
	m := regexp.MustCompile(`(?m)^\* \S+ ([0-9a-f]{64})\.\d+$`).FindStringSubmatch(g.MustRun(t, "ostree admin status"))
	if m == nil {
		t.Fatalf("ostree admin status has no booted deployment:\n%s", g.MustRun(t, "ostree admin status"))
	}
	return fromCmdline, m[1]
}

func mustBoot(t *testing.T, g *guest.Guest, want string) {
	t.Helper()
	c, s := booted(t, g)
	if c != want || s != want {
		t.Fatalf("booted %s (cmdline) / %s (ostree admin status), want %s\n%s", c, s, want, g.MustRun(t, "ostree admin status"))
	}
}

func bootedCommit(t *testing.T, g *guest.Guest) string {
	c, _ := booted(t, g)
	return c
}

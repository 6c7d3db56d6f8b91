//go:build e2e || e2e_ostree

// Package ostree runs in the ostree-booted test guest (guest.Options.Ostree):
// it boots a real ostree deployment, and ostree's own staging, finalization
// lock and shutdown finalization decide what boots next, with the launcher
// following the default boot entry across reboots like a bootloader.
//
// With -tags e2e (make e2e, make check): the agent's whole cycle on it
// (TestOstreeAgentCycle). With -tags e2e_ostree (make e2e-ostree): ostree's
// own CLI and the rpm-ostree stand-in alone on it.
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

// One ostree guest for the package's tests: each boot costs minutes.
var shared struct {
	once sync.Once
	g    *guest.Guest
	err  error
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
	shared.once.Do(func() {
		shared.g, shared.err = guest.Start(context.Background(), guest.Options{Ostree: true})
	})
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

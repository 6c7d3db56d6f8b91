//go:build e2e

package staging

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	daemonConf = "/etc/update-agent/config.d/60-e2e-daemon.toml"
	freezeConf = "/etc/update-agent/config.d/61-e2e-freeze.toml"
)

// TestDaemonKilledWhileFrozen kills the real daemon (update-agent.service
// from the RPM) with SIGKILL while the guard has rpm-ostreed frozen. The
// guard is gone with it, and a frozen rpm-ostreed never answers: systemd
// restarts the agent (Restart=on-failure), whose first step must thaw it
// before asking rpm-ostree anything, and then stage the update.
func TestDaemonKilledWhileFrozen(t *testing.T) {
	g := setup(t)
	// No etcd in this guest; a failing pre-reboot hook keeps the daemon
	// from finalizing (rebooting the shared guest) once the update is staged.
	g.MustRun(t, `printf '[agent]\ncheck_interval = "30s"\ncheck_jitter = "0s"\n[lock]\nenabled = false\n[[reboot.hooks]]\nargv = ["/bin/false"]\ntimeout = "1m"\n' >`+daemonConf)
	// Freeze at the first I/O stall and hold it (the guard's own limits),
	// so the kill lands while rpm-ostreed is frozen.
	g.MustRun(t, `printf '[guard]\nio_pressure_threshold = 0.01\nmin_freeze = "120s"\nmax_freeze = "120s"\nmin_run_share = 0.01\n' >`+freezeConf)
	t.Cleanup(func() {
		g.MustRun(t, strings.Join([]string{
			"systemctl stop update-agent.service",
			"systemctl reset-failed update-agent.service 2>/dev/null",
			"systemctl thaw rpm-ostreed.service " + stagingUnit + " 2>/dev/null",
			"systemctl stop " + stagingUnit + " 2>/dev/null; systemctl reset-failed " + stagingUnit + " 2>/dev/null",
			"rm -f " + daemonConf + " " + freezeConf + " /var/lib/update-agent/engine.json",
			"true",
		}, "; "))
	})
	nextUpdate(t, g)
	g.MustRun(t, "systemctl start update-agent.service")

	frozen := func() bool { return show(t, g, "rpm-ostreed.service", "FreezerState")["FreezerState"] == "frozen" }
	if !poll(8*time.Minute, frozen) {
		t.Fatalf("the guard never froze rpm-ostreed; journal:\n%s", g.MustRun(t, "journalctl -u update-agent --no-pager -o cat | tail -40"))
	}
	// The next start paces as configured, so the update can finish.
	g.MustRun(t, "rm -f "+freezeConf)
	g.MustRun(t, "systemctl kill --kill-whom=main -s KILL update-agent.service")
	killed := time.Now()
	if !frozen() {
		t.Fatal("rpm-ostreed thawed before the kill took effect: the test proves nothing")
	}

	// RestartSec=10s, then the first step of the start.
	if !poll(90*time.Second, func() bool { return !frozen() }) {
		t.Fatalf("rpm-ostreed still frozen %s after the agent was killed; agent:\n%s", time.Since(killed).Round(time.Second),
			g.MustRun(t, "systemctl show -p NRestarts,ActiveState,SubState update-agent; journalctl -u update-agent --no-pager -o cat | tail -30"))
	}
	t.Logf("rpm-ostreed thawed %s after the kill", time.Since(killed).Round(time.Second))

	staged := fmt.Sprintf("1.%d", generation)
	var have string
	if !poll(10*time.Minute, func() bool {
		have = strings.TrimSpace(g.MustRun(t, "timeout 20 rpm-ostree status --json | jq -r '.deployments[] | select(.staged) | .version'; true"))
		return have == staged
	}) {
		t.Fatalf("staged %q, want %s after the restart; journal:\n%s", have, staged, g.MustRun(t, "journalctl -u update-agent --no-pager -o cat | tail -60"))
	}
	if n := show(t, g, "update-agent.service", "NRestarts")["NRestarts"]; n == "0" {
		t.Errorf("update-agent NRestarts=%s: systemd did not restart it after the kill", n)
	}
	if fs := show(t, g, "rpm-ostreed.service", "FreezerState")["FreezerState"]; fs != "running" {
		t.Errorf("rpm-ostreed FreezerState=%s after staging", fs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, _, _, _ := g.Run(ctx, "journalctl -u update-agent --no-pager -o cat"); !strings.Contains(out, "thawing a unit left frozen") {
		t.Errorf("the agent's journal lacks the thaw at start:\n%s", out)
	}
}

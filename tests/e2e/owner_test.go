//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
)

// TestBootcUpdaterFencedOut: bootc's own updater, installed as bootc ships
// it and enabled as Fedora's bootc images have it, would reboot the host
// into a staged update with no slot. The daemon refuses to start (exit 79,
// no restart, doctor FAILs); with updates.mask_bootc_timer it masks the
// timer and its service until the next boot and starts; one unmasked and
// started while the agent runs is masked again within the minute. The units
// go where a bootc image has them, /usr/lib/systemd/system (a runtime mask
// does not outrank a unit file in /etc).
func TestBootcUpdaterFencedOut(t *testing.T) {
	g := guest.Shared(t)
	installAgent(t, g)
	const timer, service = "bootc-fetch-apply-updates.timer", "bootc-fetch-apply-updates.service"
	t.Cleanup(func() {
		g.MustRun(t, strings.Join([]string{
			"systemctl stop update-agent.service; systemctl reset-failed update-agent.service || true",
			"systemctl unmask --runtime " + timer + " " + service + " || true",
			"systemctl disable --now " + timer + " || true",
			"systemctl disable --now rpm-ostreed.service",
			"rm -rf /usr/lib/systemd/system/" + timer + " /usr/lib/systemd/system/" + service +
				" /etc/tmpfiles.d/ua-test-ostree-booted.conf /etc/update-agent/config.d/50-e2e.toml /etc/update-agent/config.d/60-mask.toml" +
				" /etc/systemd/system/rpm-ostreed.service /etc/tmpfiles.d/rpm-ostree-standin.tmpfiles.conf" +
				" /var/lib/rpm-ostree-standin /run/rpm-ostree-standin /srv/updates /var/lib/update-agent /root/ua-install",
			"systemctl daemon-reload",
		}, "\n"))
	})
	for _, u := range []string{timer, service} {
		local := filepath.Join(modroot.Must(t), "tests/rpmostree/units", u)
		if _, err := os.Stat(local); err != nil {
			t.Fatal(err)
		}
		if err := g.CopyIn(context.Background(), local, "/usr/lib/systemd/system/"+u); err != nil {
			t.Fatal(err)
		}
	}
	g.MustRun(t, "chmod 0644 /usr/lib/systemd/system/bootc-fetch-apply-updates.* && systemctl daemon-reload && systemctl enable --now "+timer)

	// Refused: exit 79, not restarted, the journal says what to do.
	if _, _, code, err := g.Run(context.Background(), "systemctl start update-agent"); err != nil || code == 0 {
		t.Fatalf("update-agent started beside an enabled %s (exit %d, %v)", timer, code, err)
	}
	time.Sleep(15 * time.Second) // past RestartSec: a restart would show
	props := g.MustRun(t, "systemctl show -p ExecMainStatus,NRestarts,ActiveState update-agent")
	for _, want := range []string{"ExecMainStatus=79", "NRestarts=0"} {
		if !strings.Contains(props, want+"\n") {
			t.Errorf("update-agent refused: want %s, have\n%s", want, props)
		}
	}
	if j := g.MustRun(t, "journalctl -u update-agent -b --no-pager -o cat | tail -20"); !strings.Contains(j, "bootc's own updater can reboot this host") ||
		!strings.Contains(j, "updates.mask_bootc_timer") {
		t.Errorf("the journal does not say why the agent refused:\n%s", j)
	}
	out, _, code, _ := g.Run(context.Background(), "update-agent doctor")
	if code == 0 || !strings.Contains(out, "FAIL  bootc updater") {
		t.Errorf("doctor (exit %d) does not FAIL bootc's updater:\n%s", code, out)
	}

	// With the operator's consent: masked until the next boot, running.
	g.MustRun(t, "printf '[updates]\\nmask_bootc_timer = true\\n' >/etc/update-agent/config.d/60-mask.toml && systemctl reset-failed update-agent && systemctl start update-agent")
	assertRunning(t, g)
	// Stopped: "inactive", or "failed" (a timer stopped under a mask).
	masked := func() string {
		return g.MustRun(t, "systemctl is-enabled "+timer+" "+service+" || true; systemctl is-active "+timer+" | sed 's/^failed$/inactive/' || true")
	}
	if m := masked(); m != "masked-runtime\nmasked-runtime\ninactive\n" {
		t.Errorf("after the agent's start, is-enabled timer, service, is-active timer = %q; want masked-runtime twice, inactive", m)
	}
	if out := g.MustRun(t, "update-agent doctor | grep 'bootc updater' || true"); !strings.HasPrefix(out, "ok ") {
		t.Errorf("doctor with the timer masked: %q, want ok", out)
	}

	// Unmasked and started behind the agent: masked again.
	g.MustRun(t, "systemctl unmask --runtime "+timer+" "+service+" && systemctl start "+timer)
	deadline := time.Now().Add(3 * time.Minute)
	for masked() != "masked-runtime\nmasked-runtime\ninactive\n" {
		if time.Now().After(deadline) {
			t.Fatalf("bootc's updater unmasked while the agent runs: still %q after 3 minutes", masked())
		}
		time.Sleep(5 * time.Second)
	}
	assertRunning(t, g)
}

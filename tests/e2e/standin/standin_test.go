//go:build e2e

package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
)

const (
	updates = "/var/lib/standin-updates"
	mkwork  = "/var/lib/standin-mkwork"
	marker  = "/var/lib/standin-reboot-requested"
)

func install(t *testing.T, g *guest.Guest) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := modroot.Must(t)
	dir := filepath.Join(t.TempDir(), "standin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for bin, pkg := range map[string]string{"rpm-ostree": "./tests/rpmostree/cmd/rpm-ostree", "mkupdate": "./tests/mkupdate"} {
		modroot.Build(ctx, t, filepath.Join(dir, bin), pkg)
	}
	for _, f := range []string{"rpm-ostreed.service", "ostree-finalize-staged.service", "rpm-ostree-standin.tmpfiles.conf"} {
		b, err := os.ReadFile(filepath.Join(root, "tests/rpmostree/units", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g.MustRun(t, "rm -rf /root/standin")
	if err := g.CopyIn(ctx, dir, "/root/standin"); err != nil {
		t.Fatal(err)
	}
	g.MustRun(t, strings.Join([]string{
		"set -e",
		"cd /root/standin",
		"install -m0755 rpm-ostree /usr/bin/",
		"install -m0755 mkupdate /usr/local/bin/",
		"install -m0644 rpm-ostreed.service ostree-finalize-staged.service /etc/systemd/system/",
		"install -m0644 rpm-ostree-standin.tmpfiles.conf /etc/tmpfiles.d/",
		"systemd-tmpfiles --create /etc/tmpfiles.d/rpm-ostree-standin.tmpfiles.conf",
		// finalize-deployment must not reboot behind the test's back.
		"echo 'RPMOSTREE_STANDIN_REBOOT_CMD=touch " + marker + "' >/etc/default/rpm-ostree-standin",
		publish(0),
		"rpm-ostree standin-init --osname=fedora-coreos --remote=fedora --url=file://" + updates + " os/stable",
		"systemctl daemon-reload",
		"systemctl enable --now rpm-ostreed.service ostree-finalize-staged.service",
	}, "\n"))
}

func publish(gen int) string {
	return fmt.Sprintf("mkupdate -repo %s -ref os/stable -size 4MiB -files 100 -workdir %s -generation %d", updates, mkwork, gen)
}

func status(t *testing.T, g *guest.Guest) *rpmostree.Status {
	t.Helper()
	st, err := rpmostree.ParseStatus([]byte(g.MustRun(t, "rpm-ostree status --json")))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func journalHas(t *testing.T, g *guest.Guest, unit, msg string) bool {
	t.Helper()
	entries, err := g.Journal(context.Background(), unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if m, _ := e["MESSAGE"].(string); strings.Contains(m, msg) {
			return true
		}
	}
	return false
}

func TestLockedDeploymentSurvivesRealReboot(t *testing.T) {
	g := guest.Shared(t)
	install(t, g)
	ctx := context.Background()
	first, _ := status(t, g).Booted()
	if out := g.MustRun(t, "test -e /run/ostree-booted && systemctl is-active rpm-ostreed.service ostree-finalize-staged.service"); strings.Count(out, "active") != 2 {
		t.Fatalf("units not active: %q", out)
	}

	next := strings.TrimSpace(g.MustRun(t, publish(1)))
	g.MustRun(t, "rpm-ostree upgrade --lock-finalization")
	if d, ok := status(t, g).Staged(); !ok || d.Checksum != next {
		t.Fatalf("not staged: %+v", status(t, g).Deployments)
	}
	// A reboot without finalize-deployment: the locked deployment is not applied.
	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	st := status(t, g)
	if b, _ := st.Booted(); b.Checksum != first.Checksum || len(st.Deployments) != 1 {
		t.Fatalf("after a reboot with a locked deployment: %+v", st.Deployments)
	}
	if !journalHas(t, g, "ostree-finalize-staged.service", "Not finalizing; deployment is locked for finalization") {
		t.Error("the shutdown unit did not log that it kept the locked deployment")
	}

	// finalize-deployment unlocks it (the unlocked path through a reboot is
	// covered by tests/e2e TestFullCycle; one reboot here is enough).
	g.MustRun(t, "rpm-ostree upgrade --lock-finalization")
	// The daemon runs the reboot command after replying: wait for it.
	g.MustRun(t, "rpm-ostree finalize-deployment "+next+" && for i in $(seq 100); do test -e "+marker+" && break; sleep 0.1; done; rm "+marker)
	if _, stderr, code, _ := g.Run(ctx, "rpm-ostree finalize-deployment "+next); code != 1 || !strings.Contains(stderr, "Reboot initiated") {
		t.Errorf("finalize after reboot initiated: exit %d %q", code, stderr)
	}
	g.MustRun(t, "systemctl restart rpm-ostreed.service")
	if _, stderr, code, _ := g.Run(ctx, "rpm-ostree finalize-deployment "+next); code != 1 || !strings.Contains(stderr, "error: Staged deployment already unlocked") {
		t.Errorf("finalize of the unlocked deployment: exit %d %q", code, stderr)
	}
	g.MustRun(t, "rpm-ostree cleanup -p")
}

// The update-driver check finds units from cgroups and asks systemd whether
// the driver is active, as upstream does over D-Bus.
func TestUpdateDriverUnderSystemd(t *testing.T) {
	g := guest.Shared(t)
	if _, _, code, _ := g.Run(context.Background(), "systemctl is-active rpm-ostreed.service"); code != 0 {
		install(t, g)
	}
	// RemainAfterExit keeps the driver's unit active after registering.
	g.MustRun(t, "systemd-run --unit=fake-driver -p RemainAfterExit=yes rpm-ostree deploy '' --register-driver=fake-driver")
	t.Cleanup(func() {
		g.MustRun(t, "systemctl stop fake-driver.service; systemctl reset-failed fake-driver.service || true")
	})
	var drv struct {
		Driver *rpmostree.UpdateDriver `json:"update-driver"`
	}
	for i := 0; drv.Driver == nil && i < 60; i++ {
		time.Sleep(500 * time.Millisecond)
		if err := json.Unmarshal([]byte(g.MustRun(t, "rpm-ostree status --json")), &drv); err != nil {
			t.Fatal(err)
		}
	}
	if drv.Driver == nil || drv.Driver.Unit != "fake-driver.service" || drv.Driver.Name != "fake-driver" {
		t.Fatalf("update-driver = %+v; journal: %s", drv.Driver, g.MustRun(t, "journalctl -u fake-driver --no-pager | tail"))
	}
	_, stderr, code, err := g.Run(context.Background(), "rpm-ostree upgrade --check")
	if err != nil || code != 1 || !strings.Contains(stderr, "error: Updates and deployments are driven by fake-driver (fake-driver.service)") {
		t.Errorf("check from an ssh session with an active driver: exit %d %q %v", code, stderr, err)
	}
	g.MustRun(t, "systemctl stop fake-driver.service")
	if _, stderr, code, _ := g.Run(context.Background(), "rpm-ostree upgrade --check"); code != 0 && code != 77 {
		t.Errorf("check with the driver's unit inactive: exit %d %q", code, stderr)
	}
}

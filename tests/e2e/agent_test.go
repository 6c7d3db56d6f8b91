//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/e2e/rpmpkg"
	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// installAgent installs the agent from its RPM (rpmpkg: payload and %post),
// with the rpm-ostree stand-in as rpm-ostreed.service (the agent reads
// `rpm-ostree status` before READY). The guest is not rpm-ostree booted, so
// a tmpfiles snippet makes /run/ostree-booted (the unit's condition) on
// every boot. It returns the package version, unique to this test binary.
func installAgent(t *testing.T, g *guest.Guest) (version string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pkg := rpmpkg.Build(t)
	root := modroot.Must(t)
	stage := filepath.Join(t.TempDir(), "ua-install")
	if err := os.Mkdir(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := standintest.Build(stage); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rpm-ostreed.service", "rpm-ostree-standin.tmpfiles.conf"} {
		b, err := os.ReadFile(filepath.Join(root, "tests/rpmostree/units", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stage, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// This test is about the unit's life cycle: no updates, no etcd.
	conf := "[updates]\nenabled = false\n[lock]\nenabled = false\n"
	if err := os.WriteFile(filepath.Join(stage, "50-e2e.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg.Install(t, g)
	mk := "mkupdate -repo /srv/updates -ref os/stable -size 4MiB -files 40 -mode bare-user -generation 1 >/dev/null"
	script := []string{
		"set -e",
		"cd /root/ua-install",
		"install -m0755 rpm-ostree /usr/bin/rpm-ostree",
		"install -m0755 mkupdate /usr/local/bin/mkupdate",
		"install -m0644 rpm-ostreed.service /etc/systemd/system/",
		"install -m0644 rpm-ostree-standin.tmpfiles.conf /etc/tmpfiles.d/",
		"install -Dm0644 50-e2e.toml /etc/update-agent/config.d/50-e2e.toml",
		"echo 'f /run/ostree-booted 0644 root root -' >/etc/tmpfiles.d/ua-test-ostree-booted.conf",
		"systemd-tmpfiles --create /usr/lib/tmpfiles.d/update-agent.conf /etc/tmpfiles.d/ua-test-ostree-booted.conf /etc/tmpfiles.d/rpm-ostree-standin.tmpfiles.conf",
		"test -d /var/lib/rpm-ostree-standin/ostree || { " + mk + " && rpm-ostree standin-init --osname=fedora-coreos --remote=fedora --url=file:///srv/updates os/stable; }",
		"systemctl daemon-reload",
		"systemctl enable --now rpm-ostreed.service",
		"rpm-ostree status --json >/dev/null",
	}
	g.MustRun(t, "rm -rf /root/ua-install")
	if err := g.CopyIn(ctx, stage, "/root/ua-install"); err != nil {
		t.Fatal(err)
	}
	g.MustRun(t, strings.Join(script, "\n"))
	return pkg.Version
}

// assertRunning checks the unit is active and running: for Type=notify,
// `systemctl start` only returns once the agent sent READY=1.
func assertRunning(t *testing.T, g *guest.Guest) {
	t.Helper()
	props := g.MustRun(t, "systemctl show -p Type,ActiveState,SubState,NRestarts,StatusText,MainPID update-agent")
	t.Logf("update-agent: %s", strings.ReplaceAll(strings.TrimSpace(props), "\n", ", "))
	for _, want := range []string{"Type=notify", "ActiveState=active", "SubState=running", "NRestarts=0"} {
		if !strings.Contains(props, want+"\n") {
			t.Errorf("update-agent: want %s, have\n%s\nstatus:\n%s", want, props,
				g.MustRun(t, "systemctl status --no-pager -l update-agent; journalctl -u update-agent -b --no-pager | tail -30 || true"))
		}
	}
}

// startEntry finds the agent's structured start entry of bootID.
func startEntry(t *testing.T, g *guest.Guest, bootID string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	entries, err := g.Journal(ctx, "update-agent")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e["SUMMARY"] == "update-agent starting" && e["_BOOT_ID"] == bootID {
			return e
		}
	}
	t.Fatalf("no \"update-agent starting\" entry in boot %s among %d journal entries of update-agent: %v", bootID, len(entries), entries)
	return nil
}

func bootID(t *testing.T, g *guest.Guest) string {
	t.Helper()
	return strings.ReplaceAll(strings.TrimSpace(g.MustRun(t, "cat /proc/sys/kernel/random/boot_id")), "-", "")
}

// TestAgentUnit installs the agent's RPM, enables it as an operator does
// (the preset leaves it disabled), and checks it runs as a notify service
// with a structured start entry of this build's version, before and after
// a reboot.
func TestAgentUnit(t *testing.T) {
	g := guest.Shared(t)
	version := installAgent(t, g)
	// Leave the shared guest as this test found it for the next test.
	t.Cleanup(func() {
		g.MustRun(t, strings.Join([]string{
			"systemctl disable --now update-agent.service rpm-ostreed.service",
			"rm -rf /etc/tmpfiles.d/ua-test-ostree-booted.conf /etc/update-agent/config.d/50-e2e.toml" +
				" /etc/systemd/system/rpm-ostreed.service /etc/tmpfiles.d/rpm-ostree-standin.tmpfiles.conf" +
				" /var/lib/rpm-ostree-standin /run/rpm-ostree-standin /srv/updates /var/lib/update-agent /root/ua-install",
			"systemctl daemon-reload",
		}, "\n"))
	})

	// %post applied the preset: installed, not enabled, not started.
	if out, _, _, err := g.Run(context.Background(), "systemctl is-enabled update-agent.service; systemctl is-active update-agent.service"); err != nil || out != "disabled\ninactive\n" {
		t.Errorf("after install: is-enabled, is-active = %q, %v; want disabled, inactive (the preset)", out, err)
	}
	if _, _, code, err := g.Run(context.Background(), "systemctl enable --now update-agent"); err != nil || code != 0 {
		t.Fatalf("systemctl enable --now update-agent: exit %d, %v\n%s", code, err,
			g.MustRun(t, "systemctl status --no-pager -l update-agent; journalctl -u update-agent -b --no-pager | tail -40; true"))
	}
	assertRunning(t, g)
	boot1 := bootID(t, g)
	e := startEntry(t, g, boot1)
	if e["VERSION"] != version {
		t.Errorf("start entry VERSION = %v, want %s (entry %v)", e["VERSION"], version, e)
	}
	if e["PRIORITY"] != "6" {
		t.Errorf("start entry PRIORITY = %v, want 6 (info)", e["PRIORITY"])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("guest rebooted in %s", time.Since(start).Round(time.Second))
	boot2 := bootID(t, g)
	if boot2 == boot1 {
		t.Fatalf("boot id unchanged after reboot: %s", boot1)
	}
	g.MustRun(t, "test -e /run/ostree-booted")
	assertRunning(t, g)
	if e := startEntry(t, g, boot2); e["VERSION"] != version {
		t.Errorf("start entry after reboot: VERSION = %v, want %s", e["VERSION"], version)
	}
	// The journal is persistent: the first boot's entry is still there.
	startEntry(t, g, boot1)
}

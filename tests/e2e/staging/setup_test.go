//go:build e2e

package staging

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/e2e/rpmpkg"
	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

const (
	// The stand-in's sysroot is bind-mounted from the data disk, so the
	// staging writes land on the disk the scheduler and guard watch.
	sysroot     = "/var/lib/rpm-ostree-standin"
	updatesRepo = guest.DataDir + "/updates"
	stagingUnit = "update-agent-staging.service"
	onceUnit    = "ua-e2e-stage-once.service"
	dropIn      = "/run/systemd/system/rpm-ostreed.service.d/50-update-agent-staging.conf"
	// The running daemon's policy is set live: systemd keeps it in runtime
	// control files (this one for IOWeight).
	daemonControl = "/run/systemd/system.control/rpm-ostreed.service.d/50-IOWeight.conf"
	// Small enough for a TCG guest, big enough to take seconds.
	updateSize  = "64MiB"
	updateFiles = "600"
)

var (
	setupOnce sync.Once
	setupErr  error
	// generation is the last update made in the updates repo.
	generation = 1
)

func dataDisk() string { return filepath.Base(guest.DataDevice) }

// setup installs the agent, the rpm-ostree stand-in (daemon as
// rpm-ostreed.service) and an update to stage, once per guest.
func setup(t *testing.T) *guest.Guest {
	t.Helper()
	g := guest.Shared(t)
	setupOnce.Do(func() { setupErr = install(t, g) })
	if setupErr != nil {
		t.Fatalf("setting up the guest: %v", setupErr)
	}
	return g
}

func install(t *testing.T, g *guest.Guest) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := modroot.Dir()
	if err != nil {
		return err
	}
	dir := filepath.Join(t.TempDir(), "ua-stg")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	// The agent comes from its RPM, as on a host; the rest is test scaffolding.
	rpmpkg.Build(t).Install(t, g)
	if _, err := standintest.Build(dir); err != nil {
		return err
	}
	for _, f := range []string{"rpm-ostreed.service", "ostree-finalize-staged.service", "rpm-ostree-standin.tmpfiles.conf"} {
		b, err := os.ReadFile(filepath.Join(root, "tests/rpmostree/units", f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return err
		}
	}
	// The guest has no etcd: the guard paces on the disk's own latency
	// (PSI only at a full stall: system-wide PSI counts the stager's own
	// waits). A short window so decisions follow the load within a second.
	conf := `[agent]
rpm_ostree = "/usr/bin/rpm-ostree"
[staging]
paths = ["` + sysroot + `"]
scheduler = "bfq"
io_scheduling_class = "idle"
io_weight = 10
cpu_weight = "idle"
per_object_fsync = true
timeout = "20m"
# The bfq and rate-loop window; iocost_test.go turns iocost on.
iocost = false
[guard]
enabled = true
metrics_url = ""
io_pressure_threshold = 100.0
window = "1s"
`
	if err := os.WriteFile(filepath.Join(dir, "50-e2e.toml"), []byte(conf), 0o644); err != nil {
		return err
	}
	g.MustRun(t, "rm -rf /root/ua-stg")
	if err := g.CopyIn(ctx, dir, "/root/ua-stg"); err != nil {
		return err
	}
	mk := "mkupdate -repo " + updatesRepo + " -ref os/stable -size " + updateSize + " -files " + updateFiles +
		" -mode bare-user -mutate 1 -workdir " + guest.DataDir + "/mkwork"
	g.MustRun(t, strings.Join([]string{
		"set -e",
		"cd /root/ua-stg",
		"install -m0755 rpm-ostree /usr/bin/",
		"install -m0755 mkupdate /usr/local/bin/",
		"install -m0644 rpm-ostreed.service ostree-finalize-staged.service /etc/systemd/system/",
		"install -m0644 rpm-ostree-standin.tmpfiles.conf /etc/tmpfiles.d/",
		"install -Dm0644 50-e2e.toml /etc/update-agent/config.d/50-e2e.toml",
		"systemd-tmpfiles --create /etc/tmpfiles.d/rpm-ostree-standin.tmpfiles.conf",
		"mkdir -p " + guest.DataDir + "/standin " + sysroot,
		"mountpoint -q " + sysroot + " || mount --bind " + guest.DataDir + "/standin " + sysroot,
		// What the real rpm-ostree's repo path is, for per-object fsync.
		"ln -sfn " + sysroot + "/ostree /ostree",
		mk + " -generation 1 >/dev/null",
		"rpm-ostree standin-init --osname=fedora-coreos --remote=fedora --url=file://" + updatesRepo + " os/stable",
		mk + " -generation 2 >/dev/null",
		"systemctl daemon-reload",
		"systemctl enable --now rpm-ostreed.service",
		"rpm-ostree status --json >/dev/null",
	}, "\n"))
	generation = 2
	return nil
}

// nextUpdate publishes a new generation (every file rewritten).
func nextUpdate(t *testing.T, g *guest.Guest) {
	t.Helper()
	generation++
	g.MustRun(t, fmt.Sprintf("mkupdate -repo %s -ref os/stable -size %s -files %s -mode bare-user -mutate 1 -workdir %s/mkwork -generation %d >/dev/null",
		updatesRepo, updateSize, updateFiles, guest.DataDir, generation))
}

// startStageOnce runs `update-agent stage-once` as a unit (its log goes to
// the journal, as the daemon's would).
func startStageOnce(t *testing.T, g *guest.Guest, args ...string) {
	t.Helper()
	g.MustRun(t, "systemctl stop "+onceUnit+" 2>/dev/null; systemctl reset-failed "+onceUnit+" 2>/dev/null; "+
		"systemd-run --quiet --remain-after-exit --unit="+onceUnit+" /usr/bin/update-agent stage-once "+strings.Join(args, " "))
	t.Cleanup(func() {
		g.MustRun(t, "systemctl stop "+onceUnit+"; systemctl reset-failed "+onceUnit+" 2>/dev/null; true")
	})
}

// waitStageOnce waits for stage-once to exit and returns its exit status.
func waitStageOnce(t *testing.T, g *guest.Guest, timeout time.Duration) string {
	t.Helper()
	var st string
	ok := poll(timeout, func() bool {
		st = strings.TrimSpace(g.MustRun(t, "systemctl show -p SubState --value "+onceUnit))
		return st == "exited" || st == "failed"
	})
	if !ok {
		t.Fatalf("stage-once still %s after %s; journal:\n%s", st, timeout, g.MustRun(t, "journalctl -u "+onceUnit+" --no-pager | tail -40"))
	}
	return strings.TrimSpace(g.MustRun(t, "systemctl show -p ExecMainStatus --value "+onceUnit))
}

// poll calls cond every half second until it holds or timeout passes.
func poll(timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// show returns `systemctl show` properties of unit as a map.
func show(t *testing.T, g *guest.Guest, unit string, props ...string) map[string]string {
	t.Helper()
	out := g.MustRun(t, "systemctl show "+unit+" -p "+strings.Join(props, ","))
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

func scheduler(t *testing.T, g *guest.Guest) string {
	t.Helper()
	return strings.TrimSpace(g.MustRun(t, "cat /sys/block/"+dataDisk()+"/queue/scheduler"))
}

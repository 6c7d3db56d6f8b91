//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/e2e/guestbin"
	"github.com/update-agent/update-agent/tests/e2e/rpmpkg"
	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// cycleConfig is the agent's configuration for one full cycle in the guest:
// a single-member etcd on the host itself, so quorum cannot survive this
// node's reboot by definition and leadership has nowhere to go: those two
// checks are off here (tests/cycle covers them with three members).
const cycleConfig = `[agent]
check_interval = "30s"
check_jitter = "0s"
node_name = "guest"
[lock]
group = "e2e"
reboot_lease_ttl = "15m"
[etcd]
endpoints = ["http://127.0.0.1:2379"]
[leader]
move_leader = false
require_quorum = false
[staging]
paths = ["/var/lib/rpm-ostree-standin"]
scheduler = "bfq"
# The policy checked below is the bfq/rate-loop window's (IOWeight=10);
# tests/e2e/staging covers iocost's.
iocost = false
[guard]
metrics_url = "http://127.0.0.1:2381/metrics"
# Pre-reboot hooks (docs/operations.md, "Pre-reboot hooks and the agent's sandbox"): the
# first runs in the agent's sandbox and reports what it may do; the second
# gets out of it through systemd, as the README tells a podman drain to.
[[reboot.hooks]]
argv = ["/bin/sh", "-c", "if unshare -n true 2>/dev/null; then echo hook-in-sandbox: namespaces allowed; else echo hook-in-sandbox: namespaces refused; fi; if touch /etc/ua-e2e-hook-in 2>/dev/null; then echo hook-in-sandbox: etc writable; else echo hook-in-sandbox: etc read-only; fi"]
timeout = "1m"
[[reboot.hooks]]
argv = ["/usr/bin/systemd-run", "--wait", "--pipe", "--collect", "--quiet", "--property=RuntimeMaxSec=50",
        "/usr/bin/unshare", "-n", "/bin/sh", "-c", "touch /etc/ua-e2e-hook-outside && echo hook-outside-sandbox: done"]
timeout = "1m"
`

// cycleInstall installs the agent from its RPM (rpmpkg: payload and %post)
// and builds the rpm-ostree stand-in, mkupdate and a current etcd server on
// the host to install them in the guest as a real host would have them.
func cycleInstall(t *testing.T, g *guest.Guest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	pkg := rpmpkg.Build(t)
	root := modroot.Must(t)
	stage := filepath.Join(t.TempDir(), "ua-cycle")
	if err := os.Mkdir(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := standintest.Build(stage); err != nil {
		t.Fatal(err)
	}
	guestbin.Etcd(t, ctx, filepath.Join(stage, "etcd"))
	files := map[string]string{
		"tests/rpmostree/units/rpm-ostreed.service":              "/etc/systemd/system/rpm-ostreed.service",
		"tests/rpmostree/units/ostree-finalize-staged.service":   "/etc/systemd/system/ostree-finalize-staged.service",
		"tests/rpmostree/units/rpm-ostree-standin.tmpfiles.conf": "/etc/tmpfiles.d/rpm-ostree-standin.conf",
	}
	script := []string{"set -e", "cd /root/ua-cycle",
		"install -m0755 rpm-ostree /usr/bin/",
		"install -m0755 mkupdate etcd /usr/local/bin/",
		"install -Dm0644 50-e2e.toml /etc/update-agent/config.d/50-e2e.toml",
		"install -m0644 etcd.service /etc/systemd/system/",
	}
	for src, dst := range files {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(src)
		if err := os.WriteFile(filepath.Join(stage, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		script = append(script, fmt.Sprintf("install -Dm0644 %s %s", name, dst))
	}
	for name, content := range map[string]string{"50-e2e.toml": cycleConfig, "etcd.service": guestbin.EtcdUnit} {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkg.Install(t, g)
	mk := func(gen int) string {
		return fmt.Sprintf("mkupdate -repo /var/lib/data/updates -ref os/stable -size 128MiB -files 1000 -mode bare-user -workdir /var/lib/data/mkupdate -generation %d", gen)
	}
	script = append(script,
		"echo bfq >/etc/modules-load.d/bfq.conf; modprobe bfq || true",
		"systemd-tmpfiles --create /usr/lib/tmpfiles.d/update-agent.conf /etc/tmpfiles.d/rpm-ostree-standin.conf",
		mk(0)+" >/dev/null",
		"rpm-ostree standin-init --osname=fedora-coreos --remote=fedora --url=file:///var/lib/data/updates os/stable",
		"systemctl daemon-reload",
		"systemctl enable --now etcd.service rpm-ostreed.service ostree-finalize-staged.service",
		"rpm-ostree status --json >/dev/null",
		mk(1)+" >/root/target",
	)
	g.MustRun(t, "rm -rf /root/ua-cycle")
	if err := g.CopyIn(ctx, stage, "/root/ua-cycle"); err != nil {
		t.Fatal(err)
	}
	g.MustRun(t, strings.Join(script, "\n"))
}

// guestBootID returns the guest's boot ID, or "" while it cannot be reached.
func guestBootID(g *guest.Guest) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, code, err := g.Run(ctx, "cat /proc/sys/kernel/random/boot_id")
	if err != nil || code != 0 {
		return ""
	}
	return strings.TrimSpace(out)
}

type agentStatus struct {
	Engine struct {
		State struct {
			Phase    string         `json:"phase"`
			Locked   string         `json:"locked"`
			Queued   bool           `json:"queued"`
			Failures map[string]any `json:"failures"`
		} `json:"state"`
		Action struct {
			Kind   string `json:"kind"`
			Reason string `json:"reason"`
		} `json:"action"`
		OS struct {
			Booted struct{ Checksum string }  `json:"booted"`
			Staged *struct{ Checksum string } `json:"staged"`
		} `json:"os"`
	} `json:"engine"`
	Lock *struct {
		Holders []any `json:"holders"`
		Waiters []any `json:"waiters"`
		Pending []any `json:"pending"`
	} `json:"lock"`
}

func status(t *testing.T, g *guest.Guest) (agentStatus, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _, code, err := g.Run(ctx, "update-agent status --json")
	var s agentStatus
	if err != nil || code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		return s, false
	}
	return s, true
}

// TestFullCycle is one whole update in a real systemd guest: the agent
// stages the update under its policy (transient unit, bfq, the policy set
// live on rpm-ostreed), takes the slot in a real etcd, finalizes, the guest really
// reboots into the target, and the agent releases the slot after checking
// its member, all read back from the agent's status and journal.
func TestFullCycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	g, err := guest.Start(ctx, guest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	cycleInstall(t, g)
	target := strings.TrimSpace(g.MustRun(t, "cat /root/target"))
	boot0 := guestBootID(g)
	start := time.Now()
	g.MustRun(t, "systemctl enable --now update-agent.service")

	// Staging: the policy is visible while it runs.
	var sawUnit, sawDaemon, sawBFQ string
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no reboot within 10 minutes; agent:\n%s", g.MustRun(t, "update-agent status; journalctl -u update-agent -b --no-pager | tail -40"))
		}
		b := guestBootID(g)
		if b != "" && b != boot0 {
			break
		}
		if b == "" {
			time.Sleep(2 * time.Second)
			continue
		}
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		out, _, _, _ := g.Run(rctx, "systemctl show -p ActiveState,IOSchedulingClass,IOWeight,CPUWeight update-agent-staging.service; "+
			"echo daemon-io-weight=$(systemctl show -p IOWeight --value rpm-ostreed.service); cat /sys/block/vda/queue/scheduler")
		rcancel()
		if strings.Contains(out, "ActiveState=active") {
			sawUnit = out
			if strings.Contains(out, "daemon-io-weight=10\n") {
				sawDaemon = out
			}
			if strings.Contains(out, "[bfq]") {
				sawBFQ = out
			}
		}
		time.Sleep(time.Second)
	}
	t.Logf("rebooted %s after the agent started; while staging:\n%s", time.Since(start).Round(time.Second), sawBFQ)
	if !containsAny(sawUnit, "IOSchedulingClass=3", "IOSchedulingClass=idle") || !strings.Contains(sawUnit, "IOWeight=10") ||
		!containsAny(sawUnit, "CPUWeight=idle", "CPUWeight=0\n") {
		t.Errorf("staging unit's policy never seen while staging: %q", sawUnit)
	}
	if sawDaemon == "" || sawBFQ == "" {
		t.Errorf("while staging: rpm-ostreed's IOWeight=10 seen %v, bfq seen %v", sawDaemon != "", sawBFQ != "")
	}

	// After the reboot: booted is the target, the slot is released.
	var s agentStatus
	deadline = time.Now().Add(5 * time.Minute)
	for {
		var ok bool
		s, ok = status(t, g)
		if ok && s.Engine.State.Phase == "idle" && s.Engine.Action.Kind == "wait" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not idle after the reboot: %+v\n%s", s, g.MustRun(t, "journalctl -u update-agent -b --no-pager | tail -40"))
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("idle with the target booted %s after the agent started", time.Since(start).Round(time.Second))
	if s.Engine.OS.Booted.Checksum != target || s.Engine.OS.Staged != nil || s.Engine.State.Queued || len(s.Engine.State.Failures) > 0 {
		t.Errorf("after the cycle: %+v (target %s)", s.Engine, target)
	}
	if s.Lock == nil || len(s.Lock.Holders)+len(s.Lock.Waiters)+len(s.Lock.Pending) > 0 {
		t.Errorf("lock after the cycle: %+v", s.Lock)
	}
	if sch := g.MustRun(t, "cat /sys/block/vda/queue/scheduler"); strings.Contains(sch, "[bfq]") {
		t.Errorf("bfq still selected after staging: %s", sch)
	}

	// The reboot gates and the people on the host (issue 18): systemd
	// judged the boot good before the release (the unit pulls the target
	// in), and the notice is gone with /run.
	if out := strings.TrimSpace(g.MustRun(t, "systemctl is-active boot-complete.target || true")); out != "active" {
		t.Errorf("boot-complete.target is %q after the cycle", out)
	}
	if out := g.MustRun(t, "test -e /run/motd.d/90-update-agent && echo left || echo gone"); !strings.Contains(out, "gone") {
		t.Errorf("the reboot notice outlived the reboot")
	}

	jctx, jcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer jcancel()
	entries, err := g.Journal(jctx, "update-agent")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		// SUMMARY is the bare message; MESSAGE carries the fields too.
		msg, _ := e["SUMMARY"].(string)
		for _, want := range []string{"staging started", "holding reboot slot", "released reboot slot", "state changed"} {
			if strings.Contains(msg, want) {
				seen[want] = true
			}
		}
		if e["STATE"] == "verifying" && e["TARGET_CHECKSUM"] == target && e["_BOOT_ID"] != strings.ReplaceAll(boot0, "-", "") {
			seen["verifying after the reboot"] = true
		}
		if _, ok := e["WAIT_REASON"]; ok {
			seen["wait_reason field"] = true
		}
		if msg == "reboot gate" && e["GATE"] == "etcd-alarms" && e["HOLD"] == "false" {
			seen["etcd alarm gate evaluated"] = true
		}
		if notice, _ := e["NOTICE"].(string); msg == "telling the people on the host" && e["MOTD"] == "/run/motd.d/90-update-agent" &&
			strings.Contains(notice, "reboots shortly to apply update "+target) {
			seen["reboot notice"] = true
		}
		if msg == "operation done" && e["OP"] == "telling logged-in users" {
			seen["wall ran"] = true
		}
		for _, line := range []string{"hook-in-sandbox: namespaces refused", "hook-in-sandbox: etc read-only", "hook-outside-sandbox: done"} {
			if msg == line {
				seen[line] = true
			}
		}
	}
	for _, want := range []string{"staging started", "holding reboot slot", "released reboot slot", "state changed", "verifying after the reboot", "wait_reason field",
		"etcd alarm gate evaluated", "reboot notice", "wall ran",
		"hook-in-sandbox: namespaces refused", "hook-in-sandbox: etc read-only", "hook-outside-sandbox: done"} {
		if !seen[want] {
			t.Errorf("journal of update-agent lacks %q", want)
		}
	}
	// The hook outside the sandbox wrote /etc; the one inside could not.
	if out := g.MustRun(t, "ls /etc/ua-e2e-hook-outside /etc/ua-e2e-hook-in 2>&1 || true"); !strings.Contains(out, "/etc/ua-e2e-hook-outside\n") ||
		!strings.Contains(out, "cannot access '/etc/ua-e2e-hook-in'") {
		t.Errorf("hooks' files in /etc: %q; want only the one written outside the sandbox", out)
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

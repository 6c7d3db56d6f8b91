//go:build e2e_ostree

package ostree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
)

const (
	agentBin = binDir + "/update-agent"
	// adminUnit runs the admin's `rpm-ostree upgrade`: outside the agent.
	adminUnit = "ua-e2e-admin-upgrade.service"
	// pullDelay holds the stand-in's transaction open (its test-only pull
	// delay) long enough for the agent's 5 s polls to find it and for the
	// test to look at the window under TCG.
	pullDelay = "90s"
)

// companionConfig: companion mode (updates off, pace_foreign on) with no
// lock and no etcd (etcd.local_unit would need the lock, so the window's
// raise of etcd's weight is not looked at); the window on /sysroot's disk
// under iocost (the seed model: none given), the guard on the disk's own
// latency.
const companionConfig = `[agent]
rpm_ostree = "` + rpmOT + `"
[lock]
enabled = false
[updates]
enabled = false
[staging]
pace_foreign = true
paths = ["/sysroot"]
iocost = true
[guard]
enabled = true
metrics_url = ""
io_pressure_threshold = 100.0
window = "1s"
`

// installAgent builds the agent, installs it on /var beside the stand-in
// under the packaged unit (ExecStart pointed there) with config, and
// starts it.
func installAgent(t *testing.T, g *guest.Guest, config string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := modroot.Must(t)
	dir := filepath.Join(t.TempDir(), "agent")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	modroot.Build(ctx, t, filepath.Join(dir, "update-agent"), "./cmd/update-agent")
	unit, err := os.ReadFile(filepath.Join(root, "units/update-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit = []byte(strings.ReplaceAll(string(unit), "/usr/bin/update-agent", agentBin))
	defaults, err := os.ReadFile(filepath.Join(root, "packaging/config.d/00-defaults.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"update-agent.service": unit, "00-defaults.toml": defaults, "50-e2e.toml": []byte(config)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g.MustRun(t, "rm -rf /root/agent")
	if err := g.CopyIn(ctx, dir, "/root/agent"); err != nil {
		t.Fatal(err)
	}
	// /usr is read-only in a deployment: the defaults go where the package
	// would put them, under /etc instead.
	g.MustRun(t, strings.Join([]string{
		"set -e",
		"install -D -m0755 /root/agent/update-agent " + agentBin,
		"install -D -m0644 /root/agent/00-defaults.toml /etc/update-agent/config.d/00-defaults.toml",
		"install -D -m0644 /root/agent/50-e2e.toml /etc/update-agent/config.d/50-e2e.toml",
		"install -m0644 /root/agent/update-agent.service /etc/systemd/system/",
		"systemctl daemon-reload",
		"systemctl restart update-agent.service",
	}, "\n"))
}

// windowView is what the companion's window shows on the guest at one
// moment: rpm-ostree's transaction, rpm-ostreed's policy, and
// whether any disk has iocost on.
type windowView struct {
	transaction                     bool
	ioWeight, cpuWeight, memoryHigh string
	iocostOn                        bool
	raw                             string
}

// restored: the policy and iocost as in before, no transaction.
func (v windowView) restored(before windowView) bool {
	return !v.transaction && !v.iocostOn && v.ioWeight == before.ioWeight && v.cpuWeight == before.cpuWeight &&
		v.memoryHigh == before.memoryHigh
}

// paced: the window's policy (the defaults' iocost weight, CPUWeight idle,
// a memory bound) and iocost on while the transaction runs.
func (v windowView) paced(before windowView) bool {
	return v.transaction && v.iocostOn && v.ioWeight == "1" &&
		(v.cpuWeight == "idle" || v.cpuWeight == "0") && v.memoryHigh != before.memoryHigh
}

func viewWindow(t *testing.T, g *guest.Guest) windowView {
	t.Helper()
	v := windowView{transaction: rpmStatus(t, g).Transaction != nil}
	out := g.MustRun(t, strings.Join([]string{
		"systemctl show rpm-ostreed.service -p IOWeight,CPUWeight,MemoryHigh",
		"grep 'enable=1' /sys/fs/cgroup/io.cost.qos || true",
	}, "; "))
	v.raw = fmt.Sprintf("transaction running: %v\n%s", v.transaction, out)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, val, _ := strings.Cut(l, "=")
		switch {
		case k == "IOWeight":
			v.ioWeight = val
		case k == "CPUWeight":
			v.cpuWeight = val
		case k == "MemoryHigh":
			v.memoryHigh = val
		case strings.Contains(l, "enable=1"):
			v.iocostOn = true
		}
	}
	return v
}

// TestCompanionPacesForeignStaging is companion mode on an ostree-booted
// host (issue #44): the agent, with updates.enabled = false and
// staging.pace_foreign = true, starts nothing; an admin's `rpm-ostree
// upgrade` stages on its own, and while its transaction runs the agent's
// whole window is on rpm-ostreed.service (the unit policy set live, iocost
// on the staging disk with the window's weights); once it ends all of it
// is restored, the deployment stays staged and nothing rebooted.
func TestCompanionPacesForeignStaging(t *testing.T) {
	start := time.Now()
	g := ostreeGuest(t)
	installStandin(t, g)
	base := bootedCommit(t, g)
	bootID := strings.TrimSpace(g.MustRun(t, "cat /proc/sys/kernel/random/boot_id"))
	g.MustRun(t, strings.Join([]string{
		"set -e",
		rpmOT + " standin-init --osname=debian --remote=fedora --url=file://" + updates + " os/stable",
		"echo RPMOSTREE_STANDIN_TEST_PULL_DELAY=" + pullDelay + " >/etc/default/rpm-ostree-standin",
		"systemctl enable rpm-ostreed.service; systemctl restart rpm-ostreed.service",
	}, "\n"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("journal:\n%s", g.MustRun(t, "journalctl -u update-agent -u rpm-ostreed -u "+adminUnit+" -b --no-pager | tail -80"))
		}
		// The guest is shared with the package's other tests.
		g.MustRun(t, strings.Join([]string{
			"systemctl disable --now update-agent.service 2>/dev/null",
			"rm -f /etc/systemd/system/update-agent.service /etc/update-agent/config.d/00-defaults.toml /etc/update-agent/config.d/50-e2e.toml /etc/default/rpm-ostree-standin",
			"systemctl stop " + adminUnit + " 2>/dev/null",
			"systemctl reset-failed " + adminUnit + " update-agent.service 2>/dev/null",
			"systemctl daemon-reload; systemctl restart rpm-ostreed.service",
			rpmOT + " cleanup -p >/dev/null 2>&1",
			"true",
		}, "; "))
	})

	installAgent(t, g, companionConfig)
	waitUnitJournal(t, g, "update-agent", "companion mode: pacing every rpm-ostree transaction", 3*time.Minute)
	before := viewWindow(t, g)
	if before.transaction || before.iocostOn {
		t.Fatalf("before any transaction: %s", before.raw)
	}
	t.Logf("agent up in companion mode (%s): before the transaction %+v", time.Since(start).Round(time.Second), before)

	// The admin stages, outside the agent.
	next := publish(t, g, base, 7)
	g.MustRun(t, "systemd-run --quiet --remain-after-exit --unit="+adminUnit+" "+rpmOT+" upgrade")

	// During the transaction: the window's policy, set live.
	var during windowView
	deadline := time.Now().Add(75 * time.Second)
	for {
		during = viewWindow(t, g)
		// The transaction seen before and after the look: the policy was
		// in force while it ran.
		if during.paced(before) && rpmStatus(t, g).Transaction != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no staging window on rpm-ostreed during the admin's transaction (want IOWeight=1, CPUWeight=idle, "+
				"MemoryHigh bounded, iocost on while the transaction runs); before:\n%s\nlast look:\n%s", before.raw, during.raw)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("window on during the transaction (%s): %+v", time.Since(start).Round(time.Second), during)

	// The transaction ends on its own (the agent never cancels it).
	end := time.Now().Add(5 * time.Minute)
	for strings.TrimSpace(g.MustRun(t, "systemctl show -p SubState --value "+adminUnit)) == "running" {
		if time.Now().After(end) {
			t.Fatalf("the admin's upgrade still runs after 5 minutes")
		}
		time.Sleep(2 * time.Second)
	}
	if st := strings.TrimSpace(g.MustRun(t, "systemctl show -p ExecMainStatus --value "+adminUnit)); st != "0" {
		t.Fatalf("the admin's upgrade exited %s", st)
	}

	// After it: everything as before.
	var after windowView
	deadline = time.Now().Add(45 * time.Second)
	for {
		after = viewWindow(t, g)
		if after.restored(before) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not restored after the transaction: before:\n%s\nafter:\n%s", before.raw, after.raw)
		}
		time.Sleep(2 * time.Second)
	}
	waitUnitJournal(t, g, "update-agent", "foreign transaction's staging window closed: policy restored", time.Minute)
	// The trigger (rpm-ostreed's cgroup memory.stat) read all along: on a
	// real host its dirty page cache opens the window within a second.
	if j := g.MustRun(t, "journalctl -u update-agent -b --no-pager -o cat || true"); strings.Contains(j, "the trigger is unreadable") {
		t.Errorf("companion mode's trigger failed on the guest:\n%s", j)
	}

	// Nothing rebooted or finalized: the same boot, the admin's deployment
	// still staged.
	if id := strings.TrimSpace(g.MustRun(t, "cat /proc/sys/kernel/random/boot_id")); id != bootID {
		t.Errorf("the guest rebooted: boot %s, was %s", id, bootID)
	}
	mustBoot(t, g, base)
	if d, ok := rpmStatus(t, g).Staged(); !ok || d.Checksum != next {
		t.Errorf("the admin's deployment is not staged: %+v", rpmStatus(t, g).Deployments)
	}
	if st := strings.TrimSpace(g.MustRun(t, "systemctl is-active update-agent.service || true")); st != "active" {
		t.Errorf("the agent is %s after the window, want active", st)
	}
	t.Logf("restored, nothing rebooted (%s since the test started)", time.Since(start).Round(time.Second))
}

// waitUnitJournal waits until unit's journal of this boot contains text.
func waitUnitJournal(t *testing.T, g *guest.Guest, unit, text string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		out := g.MustRun(t, "journalctl -u "+unit+" -b --no-pager -o cat || true")
		if strings.Contains(out, text) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's journal does not say %q within %s; its tail:\n%s", unit, text, limit, lastLines(out, 30))
		}
		time.Sleep(2 * time.Second)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

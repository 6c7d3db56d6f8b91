//go:build e2e

package ostree

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/e2e/guestbin"
	"github.com/update-agent/update-agent/tests/e2e/rpmpkg"
	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

const (
	// updatesRepo is the update server's repo (the file:// remote "fedora").
	updatesRepo = guest.DataDir + "/updates"
	// files is where the test's files go in the guest: /var is shared by
	// every deployment, /root is not.
	files = "/var/tmp/ua-ostree"
	// holdFile holds the agent at its reboot gate while it exists.
	holdFile = "/var/lib/ua-e2e-hold"
)

// agentConfig: a single-member etcd on the guest (quorum cannot survive the
// reboot, leadership has nowhere to go: tests/cycle covers both), and a
// command gate that holds the reboot while holdFile exists.
const agentConfig = `[agent]
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
paths = ["/sysroot", "/var/lib/data"]
scheduler = "bfq"
[guard]
metrics_url = "http://127.0.0.1:2381/metrics"
[[gates.commands]]
argv = ["/usr/bin/test", "!", "-e", "` + holdFile + `"]
timeout = "30s"
`

// TestOstreeAgentCycle is the agent on an ostree-booted host, everything
// checked from what booted (ostree= on /proc/cmdline and `ostree admin
// status`), never from the agent's own report:
//
//  1. the agent's RPM payload and the rpm-ostree stand-in are layered on
//     the booted commit (/usr is read-only) and the guest reboots into it;
//  2. the agent stages the next commit (built from that one, so the agent
//     is in it too) with ostree, locked for finalization, and holds at its
//     reboot gate; an unplanned `systemctl reboot` boots the old deployment
//     (ostree's shutdown hook does not finalize a locked deployment);
//  3. the agent stages again; the finalization lock removed behind it
//     (libostree's lock file), it discards the deployment and stages it
//     locked once more (read through ostree admin status);
//     the gate opens, it takes the slot in etcd,
//     finalizes and reboots: the target boots, the old one is the rollback,
//     the agent releases the slot.
//
// One guest, three reboots: the whole ostree scenario of make check.
func TestOstreeAgentCycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 70*time.Minute)
	defer cancel()
	start := time.Now()
	phase := func(what string) {
		t.Logf("%s (%s since the test started)", what, time.Since(start).Round(time.Second))
	}
	pkg := rpmpkg.Build(t)
	g := ostreeGuest(t)
	phase("guest up")
	base := bootedCommit(t, g)

	// 1. Layer the agent: commit base + payload as generation 0 of the
	// update repo, deploy it, reboot.
	layer := copyLayer(t, ctx, g, pkg)
	gen0 := strings.TrimSpace(g.MustRun(t, strings.Join([]string{
		"set -e",
		// bare: an archive repo would recompress the whole base tree.
		"ostree init --repo=" + updatesRepo + " --mode=bare",
		"ostree pull-local --repo=" + updatesRepo + " /ostree/repo " + base + " >/dev/null",
		"ostree commit --repo=" + updatesRepo + " -b os/stable --tree=ref=" + base + " --tree=dir=" + layer +
			" --add-metadata-string=version=gen-0 -s gen-0",
	}, "\n")))
	g.MustRun(t, strings.Join([]string{
		"set -e",
		layer + "/usr/bin/rpm-ostree standin-init --osname=debian --remote=fedora --url=file://" + updatesRepo + " os/stable",
		"ostree admin deploy --os=debian fedora:os/stable",
	}, "\n"))
	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, gen0)
	phase("booted the layered commit " + gen0)
	if _, _, code, _ := g.Run(ctx, "touch /usr/ua-write-test"); code == 0 {
		t.Fatal("/usr is writable: not an ostree deployment")
	}
	// The update: generation 0 plus a file naming the generation.
	target := strings.TrimSpace(g.MustRun(t, fmt.Sprintf("set -e; d=%[1]s/gen1; rm -rf $d; mkdir -p $d/usr/share; echo 1 >$d/usr/share/ua-generation; "+
		"ostree commit --repo=%[2]s -b os/stable --tree=ref=%[3]s --tree=dir=$d --add-metadata-string=version=gen-1 -s gen-1",
		files, updatesRepo, gen0)))
	post := ""
	if prog := pkg.PostProg(); prog != "" {
		post = prog + " " + files + "/post.sh 1"
	}
	g.MustRun(t, strings.Join([]string{
		"set -e",
		post,
		"install -Dm0644 " + files + "/50-e2e.toml /etc/update-agent/config.d/50-e2e.toml",
		"install -m0644 " + files + "/etcd.service /etc/systemd/system/",
		"touch " + holdFile,
		"echo bfq >/etc/modules-load.d/bfq.conf; modprobe bfq || true",
		"systemctl daemon-reload",
		"systemctl enable --now etcd.service rpm-ostreed.service",
		"systemctl enable --now update-agent.service",
	}, "\n"))
	if got, want := strings.TrimSpace(g.MustRun(t, "update-agent version")), "update-agent "+pkg.Version; got != want {
		t.Fatalf("the layered update-agent prints %q, want %q", got, want)
	}

	// 2. Staged and locked by the agent, held at the gate; an unplanned
	// reboot boots the old deployment.
	waitStaged(t, ctx, g, target, 20*time.Minute)
	phase("the agent staged " + target + ", locked")
	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, gen0)
	if out := g.MustRun(t, "ostree admin status; ls /run/ostree"); strings.Contains(out, target) || strings.Contains(out, "staged-deployment") {
		t.Fatalf("the locked staged deployment survived an unplanned reboot:\n%s", out)
	}
	phase("the unplanned reboot booted the old deployment")

	// 3. Staged again. Someone removes the finalization lock behind the
	// agent (what `ostree admin unlock`-like tools and bootc upgrade do):
	// the agent, held at its gate, sees it through ostree itself and
	// discards the deployment, then stages it locked once more.
	waitStaged(t, ctx, g, target, 20*time.Minute)
	phase("the agent staged " + target + " again")
	// Once the agent itself counts it staged: removed while its staging
	// returns, it is a staging that did not lock (discarded too, but as a
	// failed attempt).
	waitPhase(t, ctx, g, 5*time.Minute, "staged", "waiting_slot", "holding_slot")
	g.MustRun(t, "rm /run/ostree/staged-deployment-locked")
	waitJournal(t, ctx, g, "was unlocked outside the agent", 10*time.Minute)
	waitStaged(t, ctx, g, target, 20*time.Minute)
	phase("the agent discarded the unlocked deployment and staged it locked again")

	// The gate opens: the agent finalizes and reboots.
	if err := g.RebootWith(ctx, "rm "+holdFile); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, target)
	phase("the agent's reboot booted the target")
	if gen := strings.TrimSpace(g.MustRun(t, "cat /usr/share/ua-generation")); gen != "1" {
		t.Errorf("the booted tree has generation %q, want 1", gen)
	}
	if out := g.MustRun(t, "ostree admin status"); !strings.Contains(out, gen0+".0 (rollback)") {
		t.Errorf("generation 0 is not the rollback:\n%s", out)
	}
	if got, want := strings.TrimSpace(g.MustRun(t, "update-agent version")), "update-agent "+pkg.Version; got != want {
		t.Errorf("after the update update-agent prints %q, want %q", got, want)
	}
	waitReleased(t, ctx, g, 10*time.Minute)
	phase("the agent released the slot")
}

// copyLayer builds what is layered on the booted commit (the RPM's payload,
// with its /etc in /usr/etc as ostree wants it, the rpm-ostree stand-in and
// its daemon's unit, the etcd server) in the guest and returns its path;
// the agent's configuration and etcd's unit go to files for /etc later.
func copyLayer(t *testing.T, ctx context.Context, g *guest.Guest, pkg *rpmpkg.Package) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ua-ostree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := pkg.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := standintest.Build(dir); err != nil {
		t.Fatal(err)
	}
	guestbin.Etcd(t, ctx, filepath.Join(dir, "etcd"))
	unit, err := os.ReadFile(filepath.Join(modroot.Must(t), "tests/rpmostree/units/rpm-ostreed.service"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"rpm-ostreed.service": unit, "50-e2e.toml": []byte(agentConfig),
		"etcd.service": []byte(guestbin.EtcdUnit)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g.MustRun(t, "rm -rf "+files+"; mkdir -p "+filepath.Dir(files))
	if err := g.CopyIn(ctx, dir, files); err != nil {
		t.Fatal(err)
	}
	layer := files + "/layer"
	g.MustRun(t, strings.Join([]string{
		"set -e", "cd " + files, "mkdir " + layer,
		"tar -xf payload.tar -C " + layer,
		"if [ -d " + layer + "/etc ]; then mkdir -p " + layer + "/usr/etc; cp -a " + layer + "/etc/. " + layer + "/usr/etc/; rm -rf " + layer + "/etc; fi",
		"install -Dm0755 rpm-ostree " + layer + "/usr/bin/rpm-ostree",
		"install -Dm0755 etcd " + layer + "/usr/local/bin/etcd",
		"install -Dm0644 rpm-ostreed.service " + layer + "/usr/lib/systemd/system/rpm-ostreed.service",
	}, "\n"))
	return layer
}

// waitStaged waits until ostree itself has target staged and locked for
// finalization (its lock file, as rpm-ostree's --lock-finalization writes).
func waitStaged(t *testing.T, ctx context.Context, g *guest.Guest, target string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, _, _, _ := g.Run(rctx, "ostree admin status; test -e /run/ostree/staged-deployment-locked && echo LOCKED")
		cancel()
		if strings.Contains(out, target+".") && strings.Contains(out, "(staged)") && strings.Contains(out, "LOCKED") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not staged and locked within %s:\n%s\n%s", target, limit, out,
				g.MustRun(t, "update-agent status; journalctl -u update-agent -u rpm-ostreed -b --no-pager | tail -60"))
		}
		time.Sleep(5 * time.Second)
	}
}

// waitReleased waits for the agent, after the update, to be idle with the
// reboot lock empty.
func waitReleased(t *testing.T, ctx context.Context, g *guest.Guest, limit time.Duration) {
	t.Helper()
	var s struct {
		Engine struct {
			State struct {
				Phase string `json:"phase"`
			} `json:"state"`
			Action struct {
				Kind string `json:"kind"`
			} `json:"action"`
		} `json:"engine"`
		Lock *struct {
			Holders []any `json:"holders"`
			Waiters []any `json:"waiters"`
			Pending []any `json:"pending"`
		} `json:"lock"`
	}
	deadline := time.Now().Add(limit)
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, _, code, err := g.Run(rctx, "update-agent status --json")
		cancel()
		if err == nil && code == 0 && json.Unmarshal([]byte(out), &s) == nil && s.Engine.State.Phase == "idle" &&
			s.Engine.Action.Kind == "wait" && s.Lock != nil && len(s.Lock.Holders)+len(s.Lock.Waiters)+len(s.Lock.Pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent is not idle with the lock released within %s:\n%s\n%s", limit, out,
				g.MustRun(t, "journalctl -u update-agent -b --no-pager | tail -40"))
		}
		time.Sleep(5 * time.Second)
	}
}

// waitJournal waits until the agent's journal of this boot contains text.
func waitJournal(t *testing.T, ctx context.Context, g *guest.Guest, text string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		out, _, _, _ := g.Run(ctx, "journalctl -u update-agent -b --no-pager -o cat")
		if strings.Contains(out, text) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the agent's journal does not say %q within %s; its tail:\n%s", text, limit, tailLines(out, 30))
		}
		time.Sleep(5 * time.Second)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitPhase waits until the agent's status shows one of phases.
func waitPhase(t *testing.T, ctx context.Context, g *guest.Guest, limit time.Duration, phases ...string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		out, _, _, _ := g.Run(ctx, "update-agent status --json | jq -r .engine.state.phase")
		if slices.Contains(phases, strings.TrimSpace(out)) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the agent is %q after %s, want one of %v", strings.TrimSpace(out), limit, phases)
		}
		time.Sleep(3 * time.Second)
	}
}

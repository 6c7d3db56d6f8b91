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

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
)

const (
	// /usr is read-only in a deployment: the stand-in lives on /var, which
	// every deployment shares.
	binDir  = "/var/lib/ua-bin"
	rpmOT   = binDir + "/rpm-ostree"
	updates = guest.DataDir + "/updates"
)

// installStandin puts the stand-in on the guest in real-sysroot mode (the
// guest booted ostree= so it selects it): its daemon unit only; ostree's own
// ostree-finalize-staged.service finalizes at shutdown.
func installStandin(t *testing.T, g *guest.Guest) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := modroot.Must(t)
	dir := filepath.Join(t.TempDir(), "standin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	modroot.Build(ctx, t, filepath.Join(dir, "rpm-ostree"), "./tests/rpmostree/cmd/rpm-ostree")
	unit, err := os.ReadFile(filepath.Join(root, "tests/rpmostree/units/rpm-ostreed.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit = []byte(strings.ReplaceAll(string(unit), "/usr/bin/rpm-ostree", rpmOT))
	if err := os.WriteFile(filepath.Join(dir, "rpm-ostreed.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	base := bootedCommit(t, g)
	g.MustRun(t, "rm -rf /root/standin")
	if err := g.CopyIn(ctx, dir, "/root/standin"); err != nil {
		t.Fatal(err)
	}
	g.MustRun(t, strings.Join([]string{
		"set -e",
		"install -D -m0755 /root/standin/rpm-ostree " + rpmOT,
		"install -m0644 /root/standin/rpm-ostreed.service /etc/systemd/system/",
		// bare: an archive repo would recompress the whole base tree,
		// minutes under TCG.
		"ostree init --repo=" + updates + " --mode=bare",
		"ostree pull-local --repo=" + updates + " /ostree/repo " + base,
		// Generation 0: the booted tree on os/stable (a commit of its own:
		// the booted one is bound to its build ref, pull refuses it as
		// os/stable).
		"ostree commit --repo=" + updates + " -b os/stable --tree=ref=" + base + " --add-metadata-string=version=gen-0 -s gen-0",
		"systemctl daemon-reload",
	}, "\n"))
}

// publish commits a bootable update to the update repo: the booted tree
// plus one file naming the generation.
func publish(t *testing.T, g *guest.Guest, base string, gen int) string {
	p := fmt.Sprintf("/var/tmp/ua-gen%d", gen)
	return strings.TrimSpace(g.MustRun(t, fmt.Sprintf("set -e; rm -rf %[1]s; mkdir -p %[1]s/usr/share; echo %[2]d >%[1]s/usr/share/ua-generation; "+
		"ostree commit --repo=%[3]s -b os/stable --tree=ref=%[4]s --tree=dir=%[1]s --add-metadata-string=version=gen-%[2]d -s gen-%[2]d",
		p, gen, updates, base)))
}

func rpmStatus(t *testing.T, g *guest.Guest) *rpmostree.Status {
	t.Helper()
	st, err := rpmostree.ParseStatus([]byte(g.MustRun(t, rpmOT+" status --json")))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStandinStagesRealDeployments: the stand-in stages with ostree on the
// booted sysroot. A locked staged update does not survive an unplanned
// reboot (the old deployment boots, status has nothing staged);
// finalize-deployment unlocks it and reboots into it.
func TestStandinStagesRealDeployments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	g := ostreeGuest(t)
	installStandin(t, g)
	base := bootedCommit(t, g)
	g.MustRun(t, rpmOT+" standin-init --osname=debian --remote=fedora --url=file://"+updates+" os/stable && systemctl enable --now rpm-ostreed.service")
	if b, _ := rpmStatus(t, g).Booted(); b.Checksum != base || b.Origin != "fedora:os/stable" {
		t.Fatalf("booted per rpm-ostree status: %+v, want %s from fedora:os/stable", b, base)
	}

	next := publish(t, g, base, 1)
	g.MustRun(t, rpmOT+" upgrade --lock-finalization")
	if d, ok := rpmStatus(t, g).Staged(); !ok || d.Checksum != next {
		t.Fatalf("not staged: %+v", rpmStatus(t, g).Deployments)
	}
	if out := g.MustRun(t, "ostree admin status; ls /run/ostree"); !strings.Contains(out, next+".0 (staged)") || !strings.Contains(out, "staged-deployment-locked") {
		t.Fatalf("ostree has no locked staged deployment:\n%s", out)
	}

	// Unplanned reboot: ostree does not finalize a locked deployment.
	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, base)
	st := rpmStatus(t, g)
	if b, _ := st.Booted(); b.Checksum != base {
		t.Fatalf("after an unplanned reboot rpm-ostree says booted %s, want %s", b.Checksum, base)
	}
	if d, ok := st.Staged(); ok {
		t.Fatalf("the locked deployment survived an unplanned reboot: %+v", d)
	}

	// Staged again, finalized: the reboot boots it.
	g.MustRun(t, rpmOT+" upgrade --lock-finalization")
	if err := g.RebootWith(ctx, rpmOT+" finalize-deployment "+next); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, next)
	if b, _ := rpmStatus(t, g).Booted(); b.Checksum != next {
		t.Fatalf("rpm-ostree says booted %s, want %s", b.Checksum, next)
	}
	if gen := strings.TrimSpace(g.MustRun(t, "cat /usr/share/ua-generation")); gen != "1" {
		t.Errorf("booted tree has generation %q, want 1", gen)
	}
}

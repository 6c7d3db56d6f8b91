//go:build e2e_ostree

package ostree

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

// TestStandinDeploysByChecksum: what the update graph source stages, on a
// real ostree sysroot: `deploy --skip-branch-check revision=<checksum>` of a
// release behind the ref's tip (a barrier) stages exactly that commit,
// locked; finalize-deployment boots it, not the tip.
func TestStandinDeploysByChecksum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	g := ostreeGuest(t)
	installStandin(t, g)
	base := bootedCommit(t, g)
	g.MustRun(t, rpmOT+" standin-init --osname=debian --remote=fedora --url=file://"+updates+" os/stable && systemctl enable --now rpm-ostreed.service")
	barrier := publish(t, g, base, 1)
	tip := publish(t, g, base, 2)
	c := &rpmostree.Client{Path: rpmOT}
	argv := c.StageArgv(rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: barrier, SkipBranchCheck: true})
	g.MustRun(t, strings.Join(argv, " "))
	if d, ok := rpmStatus(t, g).Staged(); !ok || d.Checksum != barrier {
		t.Fatalf("staged %+v, want the barrier %s (tip %s)", rpmStatus(t, g).Deployments, barrier, tip)
	}
	if out := g.MustRun(t, "ostree admin status; ls /run/ostree"); !strings.Contains(out, barrier+".0 (staged)") || !strings.Contains(out, "staged-deployment-locked") {
		t.Fatalf("ostree has no locked staged deployment of the barrier:\n%s", out)
	}
	if err := g.RebootWith(ctx, rpmOT+" finalize-deployment "+barrier); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, barrier)
	if gen := strings.TrimSpace(g.MustRun(t, "cat /usr/share/ua-generation")); gen != "1" {
		t.Errorf("booted tree has generation %q, want 1 (the barrier)", gen)
	}
}

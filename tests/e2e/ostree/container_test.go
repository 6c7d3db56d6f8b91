//go:build e2e_ostree

package ostree

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

// TestStandinContainerOrigin: a host booted from a container image on a
// real ostree sysroot. The stand-in's image is an ostree ref (no OCI
// commit), but what the agent reads is what rpm-ostree shows for a
// container origin: the origin file holds container-image-reference
// (coreos/rpm-ostree rust/src/origin.rs), ostree admin status knows no
// refspec, status names the image and its digest without "origin",
// upgrade --check prints a layer diff and no commit, and finalize-deployment
// wants the staged image's digest. Staging and shutdown finalization are
// ostree's own.
func TestStandinContainerOrigin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	g := ostreeGuest(t)
	installStandin(t, g)
	base := bootedCommit(t, g)
	g.MustRun(t, rpmOT+" standin-init --osname=debian --remote=fedora --url=file://"+updates+" os/stable && systemctl enable --now rpm-ostreed.service")
	gen0 := strings.TrimSpace(g.MustRun(t, "ostree rev-parse --repo="+updates+" os/stable"))
	img := "ostree-unverified-registry:fedora/os/stable"
	// The tests after this one share the guest and set the booted
	// deployment's origin with ostree admin set-origin, which cannot read a
	// container origin ("Invalid refspec (null)"): leave every deployment
	// following the ref again, as standin-init left it.
	t.Cleanup(func() {
		g.MustRun(t, `for f in /ostree/deploy/debian/deploy/*.origin; do printf '[origin]\nrefspec=fedora:os/stable\n' > "$f"; done`)
	})

	// Rebased to the image, unlocked: a plain reboot finalizes it.
	g.MustRun(t, rpmOT+" rebase "+img)
	if d, ok := rpmStatus(t, g).Staged(); !ok || d.ContainerImageReference != img || d.Origin != "" {
		t.Fatalf("staged after the rebase: %+v", rpmStatus(t, g).Deployments)
	}
	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, gen0)
	b, _ := rpmStatus(t, g).Booted()
	if !b.IsContainer() || b.ContainerImageReference != img || b.Origin != "" || !strings.HasPrefix(b.ContainerImageReferenceDigest, "sha256:") {
		t.Fatalf("booted per rpm-ostree status: %+v, want %s with a digest and no origin", b, img)
	}
	if out := g.MustRun(t, "ostree admin status; cat /ostree/deploy/debian/deploy/"+gen0+".0.origin"); !strings.Contains(out, "origin: <unknown origin type>") ||
		!strings.Contains(out, "container-image-reference="+img) {
		t.Fatalf("ostree's record of the booted deployment:\n%s", out)
	}

	check := func() (string, int) {
		out, _, code, err := g.Run(ctx, rpmOT+" upgrade --check")
		if err != nil {
			t.Fatal(err)
		}
		return out, code
	}
	if out, code := check(); code != rpmostree.ExitUnchanged || strings.TrimSpace(out) != "No updates available." {
		t.Fatalf("upgrade --check with nothing new: exit %d\n%s", code, out)
	}
	next := publish(t, g, base, 1)
	out, code := check()
	if r := rpmostree.ParseCheck([]byte(out)); code != 0 || !r.Available || !r.Layers || r.Commit != "" || strings.Contains(out, next) {
		t.Fatalf("upgrade --check: exit %d, %+v; want a layer diff without the commit\n%s", code, r, out)
	}

	g.MustRun(t, rpmOT+" upgrade --lock-finalization")
	s, ok := rpmStatus(t, g).Staged()
	if !ok || s.Checksum != next || s.ContainerImageReference != img || s.ContainerImageReferenceDigest == b.ContainerImageReferenceDigest {
		t.Fatalf("staged %+v, want %s following %s at a new digest", rpmStatus(t, g).Deployments, next, img)
	}
	if _, stderr, code, _ := g.Run(ctx, rpmOT+" finalize-deployment "+next); code == 0 || !strings.Contains(stderr, "Expected staged base checksum") {
		t.Fatalf("finalize-deployment with the commit: exit %d, %q; want the digest asked for", code, stderr)
	}
	sum, err := s.FinalizeChecksum()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.RebootWith(ctx, rpmOT+" finalize-deployment "+sum); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, next)
	if b, _ := rpmStatus(t, g).Booted(); b.ContainerImageReference != img || b.ContainerImageReferenceDigest != s.ContainerImageReferenceDigest {
		t.Errorf("booted %+v, want %s at %s", b, img, s.ContainerImageReferenceDigest)
	}
	if gen := strings.TrimSpace(g.MustRun(t, "cat /usr/share/ua-generation")); gen != "1" {
		t.Errorf("booted tree has generation %q, want 1", gen)
	}
}

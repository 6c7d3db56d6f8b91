package cycle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gt "github.com/update-agent/update-agent/agent/graph/graphtest"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/tests/rpmostree/standin"
)

// TestGraphOCIFromVersionTag: a host booted from its image's version tag
// follows Fedora CoreOS's OCI update graph as zincati's actor does
// (coreos/zincati src/rpm_ostree/actor.rs, cli_deploy.rs): the first
// release is staged by rebasing to the stream's tag at the release's
// digest (`rebase IMAGE:stable DIGEST`), the next, once on that tag, by
// `deploy DIGEST`. The stand-in's tags are refs (os:v1 is os/v1) and its
// digests its commits'.
func TestGraphOCIFromVersionTag(t *testing.T) {
	t.Parallel()
	g := newGraphSolo(t)
	a := g.solo
	// The version tag's commit (commits are bound to their ref: its own).
	v1 := a.env.Publish("os/v1", 1)
	tagged := "ostree-unverified-registry:" + a.env.Remote + "/os:v1"
	a.env.BootImage(tagged)
	time.Sleep(1100 * time.Millisecond) // commit timestamps are seconds
	v2 := a.env.Publish(a.env.Ref, 2)
	name := a.env.Remote + "/os"
	rel := func(v, csum string) gt.Release {
		return gt.Release{Version: v, Image: name + "@" + standin.ImageDigest(csum), Rollout: gt.Done}
	}
	g.srv.Set(rel("41.1", v1), rel("41.2", v2))
	g.start()

	d2 := standin.ImageDigest(v2)
	a.waitStaged(d2)
	stream := "ostree-unverified-registry:" + name + ":stable"
	if s, _ := hostStatus(t, a).Staged(); s.ContainerImageReference != stream {
		t.Fatalf("staged %+v, want on %s", s, stream)
	}
	if want := "rebase --lock-finalization --disallow-downgrade " + stream + " " + d2; !strings.Contains(a.logb.String(), want) {
		t.Errorf("the agent did not run %q", want)
	}
	g.rebootInto(d2)

	time.Sleep(1100 * time.Millisecond)
	v3 := a.env.Publish(a.env.Ref, 3)
	d3 := standin.ImageDigest(v3)
	g.srv.Set(rel("41.1", v1), rel("41.2", v2), rel("41.3", v3))
	a.waitStaged(d3)
	if want := "deploy --lock-finalization --unchanged-exit-77 --disallow-downgrade " + d3; !strings.Contains(a.logb.String(), want) {
		t.Errorf("the agent did not run %q", want)
	}
	g.rebootInto(d3)
	g.idleNoUpdate(2)
	if b, _ := hostStatus(t, a).Booted(); b.ContainerImageReference != stream {
		t.Errorf("booted %+v, want on %s", b, stream)
	}
}

func hostStatus(t *testing.T, a *solo) *rpmostree.Status {
	t.Helper()
	out, _, _ := a.env.CLI("", "status", "--json")
	st, err := rpmostree.ParseStatus([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGraphOstreeToOCIMigration: an ostree-booted host under Fedora
// CoreOS's ostree->OCI migration, whose booted status override (as
// coreos-oci-rebase writes it: fedora-coreos-config
// overlay.d/35oci-migration; read as zincati's src/rpm_ostree/cli_status.rs)
// names the OCI graph's payload of the booted release: the agent asks the
// OCI graph as that image and rebases to the stream's tag at the next
// release's digest; after the reboot (the override lived in /run) it
// follows the image.
func TestGraphOstreeToOCIMigration(t *testing.T) {
	t.Parallel()
	g := newGraphSolo(t)
	a := g.solo
	c0 := booted(t, a)
	time.Sleep(1100 * time.Millisecond) // commit timestamps are seconds
	c1 := a.env.Publish(a.env.Ref, 1)
	name := a.env.Remote + "/os"
	d0, d1 := standin.ImageDigest(c0), standin.ImageDigest(c1)
	g.srv.Set(gt.Release{Version: "41.1", Image: name + "@" + d0, Rollout: gt.Done}, gt.Release{Version: "41.2", Image: name + "@" + d1, Rollout: gt.Done})
	g.src.Override = filepath.Join(t.TempDir(), "booted-status-override.json")
	override := `{"booted": true, "checksum": "` + c0 + `", "version": "41.1",
		"container-image-reference": "ostree-remote-registry:` + a.env.Remote + `:` + name + `@` + d0 + `",
		"container-image-reference-digest": "` + d0 + `", "base-commit-meta": {"fedora-coreos.stream": "stable"}}`
	if err := os.WriteFile(g.src.Override, []byte(override), 0o644); err != nil {
		t.Fatal(err)
	}
	g.start()

	a.waitStaged(d1)
	stream := "ostree-remote-registry:" + a.env.Remote + ":" + name + ":stable"
	if want := "rebase --lock-finalization --disallow-downgrade " + stream + " " + d1; !strings.Contains(a.logb.String(), want) {
		t.Errorf("the agent did not run %q", want)
	}
	if err := os.Remove(g.src.Override); err != nil {
		t.Fatal(err)
	}
	g.rebootInto(d1)
	g.idleNoUpdate(2)
	if b, _ := hostStatus(t, a).Booted(); b.ContainerImageReference != stream || b.Checksum != c1 {
		t.Errorf("booted %+v, want %s on %s", b, c1, stream)
	}
}

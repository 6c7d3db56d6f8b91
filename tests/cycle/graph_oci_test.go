package cycle

import (
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

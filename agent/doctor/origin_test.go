package doctor

import (
	"testing"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

func TestDescribeOrigin(t *testing.T) {
	const (
		signed   = "ostree-image-signed:docker://registry.example/example/os:stable"
		unsigned = "ostree-unverified-registry:registry.example/example/os:stable"
	)
	ostree := rpmostree.Deployment{Checksum: "c0", Origin: "fedora:fedora/x86_64/coreos/stable", Booted: true}
	layered := rpmostree.Deployment{Checksum: "m0", BaseChecksum: "c0", Origin: "fedora:fedora/x86_64/coreos/stable", Booted: true}
	image := func(ref string) rpmostree.Deployment {
		return rpmostree.Deployment{Checksum: "c0", ContainerImageReference: ref, ContainerImageReferenceDigest: "sha256:ab", Booted: true}
	}
	for _, c := range []struct {
		name          string
		b             rpmostree.Deployment
		source, image string
		want          string
	}{
		{"ostree ref", ostree, "origin", "",
			"ostree ref fedora:fedora/x86_64/coreos/stable; updates.source = origin: upgrade --check (a new base commit), staged by deploy revision="},
		{"layered", layered, "", "",
			"ostree ref fedora:fedora/x86_64/coreos/stable with layered packages; updates.source = origin: upgrade --check (a new base commit; layered package updates alone are not an update), staged by deploy revision="},
		{"signed image", image(signed), "origin", "",
			"container image " + signed + " (signed: checked against the containers signature policy), digest sha256:ab; updates.source = origin: upgrade --check (a layer diff: the target is named by the image until staged), staged by upgrade"},
		{"unverified image", image(unsigned), "origin", "",
			"container image " + unsigned + " (unverified: no signature check), digest sha256:ab; updates.source = origin: upgrade --check (a layer diff: the target is named by the image until staged), staged by upgrade"},
		{"image source, not yet followed", ostree, "image", signed,
			"ostree ref fedora:fedora/x86_64/coreos/stable; updates.source = image: rebase to updates.image " + signed + " (signed: checked against the containers signature policy)"},
		{"image source, followed", image(signed), "image", signed,
			"container image " + signed + " (signed: checked against the containers signature policy), digest sha256:ab; updates.source = image: upgrade --check (a layer diff: the target is named by the image until staged), staged by upgrade"},
		{"graph", ostree, "graph", "",
			"ostree ref fedora:fedora/x86_64/coreos/stable; updates.source = graph: the update graph chooses the release, staged exactly (deploy)"},
	} {
		if got := describeOrigin(c.b, c.source, c.image); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

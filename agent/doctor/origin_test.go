package doctor

import (
	"context"
	"errors"
	"strings"
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

// TestOriginOffGraph: the origin line fails on a host with an update
// graph whose updates.source is not the graph, saying why and which key to
// set; with the graph, or no graph on the host, it passes.
func TestOriginOffGraph(t *testing.T) {
	const zf = "/usr/lib/zincati/config.d/50-fedora-coreos-cincinnati.toml"
	for _, c := range []struct {
		name              string
		source, hostGraph string
		fail              string // substring of the error, "" = ok
		ok                string // substring of the detail
	}{
		{"no graph on the host", "origin", "", "", ""},
		{"graph followed", "graph", "https://updates.example", "", ""},
		{"graph by default", "graph", "https://updates.example", "", "updates.source = graph: the update graph chooses the release, staged exactly (deploy) (no fragment sets updates.source: zincati's graph in " + zf + ")"},
		{"origin beside a graph", "origin", "https://updates.example",
			"this host has an update graph (cincinnati.base_url https://updates.example in zincati's " + zf + ") that updates.source = origin (set in /etc/update-agent/config.d/50-x.toml) does not follow: " +
				"rpm-ostree upgrade follows the ref, skipping the graph's barriers and dead ends; set updates.source = \"graph\"", ""},
		{"zincati unreadable", "origin", "", "cannot tell whether this host has an update graph that updates.source = origin does not follow: zincati.toml: bad", ""},
		{"image beside a graph", "image", "https://updates.example", "a rebase to updates.image follows the tag, skipping the graph's barriers and dead ends", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := good()
			d.In.Source, d.In.SourceFile, d.In.HostGraph, d.In.HostGraphFile = c.source, "/etc/update-agent/config.d/50-x.toml", c.hostGraph, zf
			if c.name == "graph by default" {
				d.In.SourceFile = zf
			}
			if c.name == "zincati unreadable" {
				d.In.HostGraphErr = errors.New("zincati.toml: bad")
			}
			if c.source == "image" {
				d.In.Image = "ostree-unverified-registry:registry.example/os:stable"
			}
			got, err := d.origin(context.Background())
			switch {
			case c.fail == "" && err != nil:
				t.Errorf("failed: %v", err)
			case c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)):
				t.Errorf("got %q, %v; want a failure containing %q", got, err, c.fail)
			case !strings.Contains(got, c.ok):
				t.Errorf("got %q, want it to contain %q", got, c.ok)
			}
		})
	}
}

package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

// origin is the "origin" line: what the booted deployment follows and how
// the rpm-ostree backend finds and stages its updates.
func (d Doctor) origin(ctx context.Context) (string, error) {
	_, b, err := d.booted(ctx)
	if err != nil {
		return "", err
	}
	s := describeOrigin(b, d.In.Source, d.In.Image)
	if d.In.HostGraphFile != "" && d.In.SourceFile == d.In.HostGraphFile {
		s += " (no fragment sets updates.source: zincati's graph in " + d.In.HostGraphFile + ")"
	}
	if err := offGraph(d.In); err != nil {
		return "", fmt.Errorf("%s; %w", s, err)
	}
	return s, nil
}

// offGraph fails a host that has an update graph (Fedora CoreOS: zincati's
// configuration names one) while updates.source follows something else:
// the ref or a tag moves past the graph's barriers (releases every node
// must pass through) and onto its dead ends.
func offGraph(in Inputs) error {
	// In companion mode the agent follows nothing: zincati follows the graph.
	if in.Source == "graph" || in.companionMode() {
		return nil
	}
	if in.HostGraphErr != nil {
		return fmt.Errorf("cannot tell whether this host has an update graph that updates.source = %s does not follow: %w", in.Source, in.HostGraphErr)
	}
	if in.HostGraph == "" {
		return nil
	}
	how := "rpm-ostree upgrade follows the ref"
	if in.Source == "image" {
		how = "a rebase to updates.image follows the tag"
	}
	return fmt.Errorf("this host has an update graph (cincinnati.base_url %s in zincati's %s) that updates.source = %s (set in %s) does not follow: "+
		"%s, skipping the graph's barriers and dead ends; set updates.source = \"graph\" (or remove it: the graph is then the default)",
		in.HostGraph, in.HostGraphFile, in.Source, in.SourceFile, how)
}

// imageSignatures are the ways an image reference says how it is verified
// (ostree-ext's SignatureSource, bootc-dev/bootc
// crates/ostree-ext/src/container/mod.rs).
var imageSignatures = []struct{ prefix, says string }{
	{"ostree-image-signed:", "signed: checked against the containers signature policy"},
	{"ostree-remote-image:", "signed: checked with an ostree remote's keys"},
	{"ostree-remote-registry:", "signed: checked with an ostree remote's keys"},
	{"ostree-unverified-image:", "unverified: no signature check"},
	{"ostree-unverified-registry:", "unverified: no signature check"},
}

// imageSignature says how ref is verified ("" for an unknown form).
func imageSignature(ref string) string {
	for _, s := range imageSignatures {
		if strings.HasPrefix(ref, s.prefix) {
			return s.says
		}
	}
	return ""
}

// describeOrigin says what booted follows and, for updates.source (source,
// image), how the rpm-ostree backend finds and stages its updates. The
// words matter where rpm-ostree differs per origin: `upgrade --check`
// shows a container origin's update as a layer diff without its digest.
func describeOrigin(b rpmostree.Deployment, source, image string) string {
	var what string
	switch {
	case b.IsContainer():
		what = "container image " + b.ContainerImageReference
		if s := imageSignature(b.ContainerImageReference); s != "" {
			what += " (" + s + ")"
		}
		if b.ContainerImageReferenceDigest != "" {
			what += ", digest " + b.ContainerImageReferenceDigest
		}
	case b.BaseChecksum != "":
		what = "ostree ref " + b.Origin + " with layered packages"
	default:
		what = "ostree ref " + b.Origin
	}
	var how string
	switch {
	case source == "graph":
		how = "the update graph chooses the release, staged exactly (deploy)"
	case source == "image" && b.ContainerImageReference != image:
		how = "rebase to updates.image " + image
		if s := imageSignature(image); s != "" {
			how += " (" + s + ")"
		}
	case b.IsContainer():
		how = "upgrade --check (a layer diff: the target is named by the image until staged), staged by upgrade"
	case b.BaseChecksum != "":
		how = "upgrade --check (a new base commit; layered package updates alone are not an update), staged by deploy revision="
	default:
		how = "upgrade --check (a new base commit), staged by deploy revision="
	}
	if source == "" {
		source = "origin"
	}
	return fmt.Sprintf("%s; updates.source = %s: %s", what, source, how)
}

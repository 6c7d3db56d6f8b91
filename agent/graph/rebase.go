package graph

import (
	"errors"
	"fmt"
	"strings"
)

// RebaseRef is how an update graph's OCI release (pullspec, pinned by
// digest) is staged over the local deployment whose image reference is
// local (the staged deployment if any, else the booted one), as zincati's
// StageDeployment (src/rpm_ostree/actor.rs) decides: when local already
// follows the release's image name at the stream's tag, deploy the digest
// (rebase is ""); otherwise rebase to that name and tag, keeping local's
// signature policy and transport, pinned at the digest. That is how a
// renamed image (a new registry or name) is followed at all, and how a host
// booted from a version tag or a digest is put back on the stream's tag.
//
// The tag is the stream the graph was asked for; zincati takes the local
// deployment's stream, and so reaches the same tag one staging later when
// the configured stream differs.
func RebaseRef(local, pullspec, stream string) (rebase string, err error) {
	if stream == "" {
		return "", errors.New("no update stream to tag the image with")
	}
	if _, ok := Digest(pullspec); !ok {
		return "", fmt.Errorf("release payload %q is not pinned by a sha256 digest", pullspec)
	}
	prefix, name, ok := splitImageRef(local)
	if !ok {
		// zincati refuses too: the OCI graph is asked only for an image
		// origin, and a registry is what the release names.
		return "", fmt.Errorf("the local deployment's origin %q is not an image from a registry: cannot follow an OCI release from it", local)
	}
	tagged := ImageName(pullspec) + ":" + stream
	if name == tagged {
		return "", nil
	}
	return prefix + tagged, nil
}

// splitImageRef splits an ostree image reference into what precedes the
// image name (signature policy, remote, registry transport) and the name
// ("quay.example/fedora/coreos:stable"), as ostree-ext parses it
// (OstreeImageReference, then ImageReference): "ostree-image-signed:",
// "ostree-unverified-image:" and "ostree-remote-image:REMOTE:" precede a
// TRANSPORT:NAME; "ostree-unverified-registry:" and
// "ostree-remote-registry:REMOTE:" a registry NAME. Only the registry
// transport ("registry:", "docker://") names an image a graph can.
func splitImageRef(ref string) (prefix, name string, ok bool) {
	scheme, rest, ok := strings.Cut(ref, ":")
	if !ok {
		return "", "", false
	}
	prefix = scheme + ":"
	switch scheme {
	case "ostree-unverified-registry":
		return prefix, rest, rest != ""
	case "ostree-remote-registry", "ostree-remote-image":
		remote, after, ok := strings.Cut(rest, ":")
		if !ok || remote == "" {
			return "", "", false
		}
		prefix, rest = prefix+remote+":", after
		if scheme == "ostree-remote-registry" {
			return prefix, rest, rest != ""
		}
	case "ostree-image-signed", "ostree-unverified-image":
	default:
		return "", "", false
	}
	transport, name, ok := strings.Cut(rest, ":")
	if !ok || (transport != "registry" && transport != "docker") {
		return "", "", false
	}
	name = strings.TrimPrefix(name, "//")
	return prefix + rest[:len(rest)-len(name)], name, name != ""
}

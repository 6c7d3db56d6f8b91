package graph_test

import (
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/graph"
)

// TestRebaseRef: as zincati's StageDeployment (src/rpm_ostree/actor.rs), an
// OCI release is deployed by digest only when the local deployment follows
// its image at the stream's tag; a renamed image, a version tag or a digest
// is rebased to the stream's tag, policy and transport kept.
func TestRebaseRef(t *testing.T) {
	pin := "quay.example/fedora/fedora-coreos@sha256:" + sum('2')
	for _, tc := range []struct{ name, local, pullspec, stream, want, err string }{
		{"on the stream's tag: deploy", "ostree-remote-image:fedora:docker://quay.example/fedora/fedora-coreos:stable", pin, "stable", "", ""},
		{"registry: transport: deploy", "ostree-remote-image:fedora:registry:quay.example/fedora/fedora-coreos:stable", pin, "stable", "", ""},
		{"renamed image", "ostree-remote-image:fedora:docker://old.example/coreos:stable", pin, "stable",
			"ostree-remote-image:fedora:docker://quay.example/fedora/fedora-coreos:stable", ""},
		{"a version tag", "ostree-unverified-registry:quay.example/fedora/fedora-coreos:41.20250101.3.0", pin, "stable",
			"ostree-unverified-registry:quay.example/fedora/fedora-coreos:stable", ""},
		{"a digest", "ostree-image-signed:docker://quay.example/fedora/fedora-coreos@sha256:" + sum('1'), pin, "stable",
			"ostree-image-signed:docker://quay.example/fedora/fedora-coreos:stable", ""},
		{"another stream", "ostree-remote-image:fedora:docker://quay.example/fedora/fedora-coreos:stable", pin, "next",
			"ostree-remote-image:fedora:docker://quay.example/fedora/fedora-coreos:next", ""},
		{"ostree-remote-registry: on the tag", "ostree-remote-registry:fedora:quay.example/fedora/fedora-coreos:stable", pin, "stable", "", ""},
		{"ostree-remote-registry: renamed", "ostree-remote-registry:fedora:old.example/registry:5000/coreos:stable", pin, "stable",
			"ostree-remote-registry:fedora:quay.example/fedora/fedora-coreos:stable", ""},
		{"unverified image, registry transport", "ostree-unverified-image:registry:quay.example/fedora/fedora-coreos:41.1", pin, "stable",
			"ostree-unverified-image:registry:quay.example/fedora/fedora-coreos:stable", ""},
		{"an ostree origin", "", pin, "stable", "", "not an image from a registry"},
		{"an unknown scheme", "docker://quay.example/fedora/fedora-coreos:stable", pin, "stable", "", "not an image from a registry"},
		{"not from a registry", "ostree-unverified-image:oci:/var/os", pin, "stable", "", "not an image from a registry"},
		{"not pinned", "ostree-unverified-registry:quay.example/x:stable", "quay.example/x:stable", "stable", "", "not pinned"},
		{"no stream", "ostree-unverified-registry:quay.example/x:stable", pin, "", "", "no update stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := graph.RebaseRef(tc.local, tc.pullspec, tc.stream)
			if got != tc.want || tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("RebaseRef = %q, %v; want %q, %q", got, err, tc.want, tc.err)
			}
		})
	}
}

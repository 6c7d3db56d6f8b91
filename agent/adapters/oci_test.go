package adapters

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// fakeOCI is an rpm-ostree that shows any image origin (registry hosts,
// digest-pinned references, the stand-in shows only its own refs): status
// prints before, then after once a deploy or rebase ran, whose argv it
// records.
func fakeOCI(t *testing.T, before, after rpmostree.Status) (c *rpmostree.Client, argv func() string) {
	dir := t.TempDir()
	for name, st := range map[string]rpmostree.Status{"status.json": before, "after.json": after} {
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := "#!/bin/sh\nD=" + dir + "\ncase \"$1\" in\nstatus) cat $D/status.json ;;\n" +
		"deploy|rebase) echo \"$*\" > $D/argv; cp $D/after.json $D/status.json ;;\n*) exit 1 ;;\nesac\n"
	path := filepath.Join(dir, "rpm-ostree")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &rpmostree.Client{Path: path}, func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "argv"))
		return strings.TrimSpace(string(b))
	}
}

// TestStageOCI runs an update graph's OCI release through the stager: the
// command zincati would run (src/rpm_ostree/cli_deploy.rs), for a host on
// the stream's tag, on a renamed image, and ostree-booted under the
// migration's override.
func TestStageOCI(t *testing.T) {
	const img = "registry.example/fedora/coreos"
	dg := "sha256:" + strings.Repeat("2", 64)
	meta := map[string]any{"ostree.container.image-config": `{"config":{"Labels":{"com.coreos.stream":"stable"}}}`}
	on := func(ref, digest string, booted bool) rpmostree.Deployment {
		return rpmostree.Deployment{ID: digest, Checksum: strings.Repeat("c", 64), ContainerImageReference: ref,
			ContainerImageReferenceDigest: digest, Booted: booted, Staged: !booted, BaseCommitMeta: meta}
	}
	tagged := "ostree-remote-image:fedora:docker://" + img + ":stable"
	renamed := "ostree-remote-image:fedora:docker://old.example/coreos:stable"
	ostree := rpmostree.Deployment{ID: "o", Checksum: strings.Repeat("a", 64), Booted: true}
	// What Fedora CoreOS's coreos-oci-rebase writes: the OCI graph's payload
	// for the booted version (fedora-coreos-config, overlay.d/35oci-migration).
	booted1 := "sha256:" + strings.Repeat("1", 64)
	override := `{"booted":true,"container-image-reference":"ostree-remote-registry:fedora:` + img + `@` + booted1 +
		`","container-image-reference-digest":"` + booted1 + `","base-commit-meta":{"fedora-coreos.stream":"stable"},"checksum":"` +
		strings.Repeat("a", 64) + `","version":"41.1"}`
	for _, tc := range []struct {
		name     string
		booted   rpmostree.Deployment
		override string
		want     string
	}{
		{"on the stream's tag: deploy", on(tagged, "sha256:1", true), "", "deploy --lock-finalization --unchanged-exit-77 --disallow-downgrade " + dg},
		{"renamed image: rebase", on(renamed, "sha256:1", true), "", "rebase --lock-finalization --disallow-downgrade " + tagged + " " + dg},
		{"ostree-booted, the migration's override: rebase", ostree, override,
			"rebase --lock-finalization --disallow-downgrade ostree-remote-registry:fedora:" + img + ":stable " + dg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := rpmostree.Status{Deployments: []rpmostree.Deployment{on(tagged, dg, false), tc.booted}}
			c, argv := fakeOCI(t, rpmostree.Status{Deployments: []rpmostree.Deployment{tc.booted}}, after)
			p := PlainStager{Client: c, Exact: true}
			if tc.override != "" {
				p.Override = filepath.Join(t.TempDir(), "booted-status-override.json")
				if err := os.WriteFile(p.Override, []byte(tc.override), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := p.Stage(context.Background(), state.Target{Checksum: dg, Version: "41.2", Image: img + "@" + dg, Stream: "stable"})
			if got := strings.TrimPrefix(argv(), c.Path+" "); err != nil || got != tc.want {
				t.Fatalf("ran %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

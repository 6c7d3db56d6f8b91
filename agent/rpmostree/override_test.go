package rpmostree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWithBootedOverride: as zincati's invoke_cli_status, the file's
// deployment replaces the booted one only; no file, no change; a file that
// cannot be read is an error.
func TestWithBootedOverride(t *testing.T) {
	st := &Status{Deployments: []Deployment{{ID: "s", Checksum: "c2", Staged: true}, {ID: "b", Checksum: "c1", Booted: true}, {ID: "r", Checksum: "c0"}}}
	dir := t.TempDir()
	path := filepath.Join(dir, "booted-status-override.json")
	if got, err := WithBootedOverride(st, path); err != nil || got != st {
		t.Fatalf("no file: %v, %v", got, err)
	}
	// The fields zincati reads (src/rpm_ostree/cli_status.rs Deployment).
	file := `{"booted": true, "checksum": "c1", "version": "41.1",
		"container-image-reference": "ostree-remote-image:fedora:registry:quay.example/fedora/fedora-coreos:stable",
		"container-image-reference-digest": "sha256:d1",
		"base-commit-meta": {"ostree.manifest": "{\"annotations\":{\"fedora-coreos.stream\":\"stable\"}}"}}`
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := WithBootedOverride(st, path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := got.Booted()
	if !b.IsContainer() || b.Target() != "sha256:d1" || b.Version != "41.1" {
		t.Errorf("booted %+v, want the override's", b)
	}
	if s, _ := got.Staged(); s.ID != "s" || got.Deployments[2].ID != "r" || len(got.Deployments) != 3 {
		t.Errorf("other deployments changed: %+v", got.Deployments)
	}
	if b, _ := st.Booted(); b.IsContainer() {
		t.Error("the status passed in was changed")
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WithBootedOverride(st, path); err == nil || !strings.Contains(err.Error(), "booted status override") {
		t.Errorf("malformed file: %v", err)
	}
}

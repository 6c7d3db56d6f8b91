package rpmostree

import "testing"

// Check outputs as upstream prints them: rpmostree_print_cached_update and
// rpmostree_print_manifest_diff (coreos/rpm-ostree,
// src/app/rpmostree-clientlib.cxx) with max_key_len 13, printf "  %*s: %s".
const (
	// An ostree ref with a new base commit.
	checkOstree = "AvailableUpdate:\n" +
		"        Version: 39.20240210.3.0 (2024-02-10T13:24:18Z)\n" +
		"         Commit: 6b6fc6a3e1a0\n" +
		"   GPGSignature: Valid signature by 115DF9AEF857853EE8445D0A0727707EA15B79CC\n"
	// A layered host whose base did not move, one layered package newer:
	// coreos/rpm-ostree tests/vmcheck/test-autoupdate-check.sh asserts
	// "Diff: 1 upgraded" and no Version, Timestamp nor Commit.
	checkLayeredOnly = "AvailableUpdate:\n" +
		"           Diff: 1 upgraded\n"
	// A layered host with a new base: Commit and the package diff.
	checkLayeredBase = "AvailableUpdate:\n" +
		"        Version: 39.20240210.3.0 (2024-02-10T13:24:18Z)\n" +
		"         Commit: 6b6fc6a3e1a0\n" +
		"           Diff: 10 upgraded, 1 downgraded, 1 removed, 1 added\n"
	// A container origin: coreos/rpm-ostree
	// tests/kolainst/destructive/container-update-check asserts
	// "AvailableUpdate:", "Total layers:", "Size:", "Removed layers:",
	// "Added layers:"; ref-has-new-commit is false, so no Commit.
	checkContainer = "AvailableUpdate:\n" +
		"   Total layers: 51\n" +
		"           Size: 1.1 GB\n" +
		" Removed layers: 1\n" +
		"           Size: 2.1 kB\n" +
		"   Added layers: 2\n" +
		"           Size: 20.4 MB\n"
)

// UpstreamCheck are the fixtures by origin, for the stand-in's contract tests.
var UpstreamCheck = map[string]string{"ostree": checkOstree, "layered-only": checkLayeredOnly,
	"layered-base": checkLayeredBase, "container": checkContainer}

func TestParseCheck(t *testing.T) {
	cases := []struct {
		name, out    string
		want         CheckResult
		packagesOnly bool
	}{
		{"ostree", checkOstree, CheckResult{Available: true, Version: "39.20240210.3.0", Commit: "6b6fc6a3e1a0"}, false},
		{"layered, packages only", checkLayeredOnly, CheckResult{Available: true, Diff: "1 upgraded"}, true},
		{"layered, new base", checkLayeredBase, CheckResult{Available: true, Version: "39.20240210.3.0", Commit: "6b6fc6a3e1a0",
			Diff: "10 upgraded, 1 downgraded, 1 removed, 1 added"}, false},
		{"container", checkContainer, CheckResult{Available: true, Layers: true}, false},
	}
	for _, c := range cases {
		got := ParseCheck([]byte(c.out))
		if got != c.want || got.PackagesOnly() != c.packagesOnly {
			t.Errorf("%s: ParseCheck = %+v (packages only %v), want %+v (%v)", c.name, got, got.PackagesOnly(), c.want, c.packagesOnly)
		}
	}
}

// TestParseCachedUpdate: status's "cached-update" after a container check,
// with the keys coreos/rpm-ostree tests/kolainst/destructive/
// container-update-check asserts (version, origin, the manifest diff).
func TestParseCachedUpdate(t *testing.T) {
	const js = `{"deployments": [], "cached-update": {
		"osname": "fedora-coreos", "checksum": "5d3e0a1b", "version": "2", "timestamp": 1707787920,
		"origin": "ostree-unverified-image:containers-storage:localhost/fcos-derived",
		"gpg-enabled": false, "ref-has-new-commit": false,
		"manifest-diff": {"total": 51, "total-size": 1100000000, "n-removed": 1, "removed-size": 2100, "n-added": 2, "added-size": 20400000},
		"update-sha256": "5d3e0a1b"}}`
	st, err := ParseStatus([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	want := CachedUpdate{Origin: "ostree-unverified-image:containers-storage:localhost/fcos-derived", Checksum: "5d3e0a1b", Version: "2"}
	if st.CachedUpdate == nil || *st.CachedUpdate != want {
		t.Errorf("cached-update = %+v, want %+v", st.CachedUpdate, want)
	}
	if st, _ := ParseStatus([]byte(`{"deployments": [], "cached-update": null}`)); st.CachedUpdate != nil {
		t.Errorf("null cached-update = %+v", st.CachedUpdate)
	}
}

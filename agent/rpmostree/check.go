package rpmostree

import (
	"bufio"
	"bytes"
	"strings"
)

// CheckResult is the outcome of `upgrade --check`: the "AvailableUpdate:"
// block of rpmostree_print_cached_update (coreos/rpm-ostree,
// src/app/rpmostree-clientlib.cxx). Which lines it has depends on the
// origin:
//   - ostree ref, new base commit: Version (or Timestamp) and Commit;
//   - layered host, only newer layered packages: a Diff line, no Commit
//     (tests/vmcheck/test-autoupdate-check.sh, "check mode layered only");
//   - container image: the layer diff (Total layers, Removed layers,
//     Added layers), no Commit nor digest: the daemon never resolves the
//     new image to a commit before pulling it (src/daemon/
//     rpmostreed-deployment-utils.cxx, rpmostreed_update_generate_variant).
type CheckResult struct {
	Available bool
	// Version and Commit are shown only for a new base commit.
	Version string
	Commit  string
	// Diff is the package diff summary ("1 upgraded, 2 added"), if shown.
	Diff string
	// Layers is set when the container layer diff was shown.
	Layers bool
}

// PackagesOnly reports an update that changes layered packages but not the
// base: neither a new commit nor new image layers.
func (r CheckResult) PackagesOnly() bool {
	return r.Available && r.Commit == "" && !r.Layers && r.Diff != ""
}

// ParseCheck reads the "Key: value" lines that follow "AvailableUpdate:".
// The layer diff's "Size:" lines are not kept: the agent does not decide
// on sizes.
func ParseCheck(out []byte) CheckResult {
	r := CheckResult{Available: true}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Version":
			r.Version, _, _ = strings.Cut(v, " ")
		case "Commit":
			r.Commit = v
		case "Diff":
			r.Diff = v
		case "Total layers", "Removed layers", "Added layers":
			r.Layers = true
		}
	}
	return r
}

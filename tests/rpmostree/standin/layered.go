package standin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Layered hosts. The stand-in has no RPMs: a deployment's layered packages
// are names with an EVR (Dep.Layered), and the rpm-md repos are a JSON
// object of name to EVR beside the update repo (rpmmdFile). Enough to
// print what upstream prints when only layered packages have updates.

// rpmmdFile is the stand-in's rpm-md: {"name": "EVR"}.
func rpmmdFile(src string) string { return filepath.Join(src, "standin-rpmmd.json") }

// layeredChecksum stands for the local merge commit rpm-ostree makes of
// the base and the layered packages: status's "checksum", the base being
// "base-checksum".
func layeredChecksum(d Dep) string {
	h := sha256.New()
	fmt.Fprintf(h, "standin-layered:%s", d.Checksum)
	for _, n := range mapsKeys(d.Layered) {
		fmt.Fprintf(h, "\n%s-%s", n, d.Layered[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// mapsKeys returns m's keys, sorted.
func mapsKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// newerPackages returns the layered packages with a newer EVR in rpmmd
// (an older one is no update: test-autoupdate-check.sh builds one to
// check that), and the layered set after upgrading them.
func newerPackages(layered, rpmmd map[string]string) (int, map[string]string) {
	n := 0
	next := map[string]string{}
	for name, evr := range layered {
		next[name] = evr
		if v, ok := rpmmd[name]; ok && evrCompare(v, evr) > 0 {
			next[name] = v
			n++
		}
	}
	return n, next
}

// evrCompare compares "2.1-4" with "2.1-3" by numeric fields (enough for
// the stand-in's packages; not rpmvercmp).
func evrCompare(a, b string) int {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' || r == ':' })
	}
	fa, fb := split(a), split(b)
	for i := 0; i < len(fa) && i < len(fb); i++ {
		x, errx := strconv.Atoi(fa[i])
		y, erry := strconv.Atoi(fb[i])
		switch {
		case errx == nil && erry == nil && x != y:
			return x - y
		case (errx != nil || erry != nil) && fa[i] != fb[i]:
			return strings.Compare(fa[i], fb[i])
		}
	}
	return len(fa) - len(fb)
}

// diffSummary is rpmostree_generate_diff_summary (coreos/rpm-ostree
// src/libpriv/rpmostree-util.cxx) for upgrades only.
func diffSummary(upgraded int) string {
	if upgraded == 0 {
		return ""
	}
	return fmt.Sprintf("%d upgraded", upgraded)
}

// layer is `standin-layer NAME=EVR...`: a test hook that makes the booted
// deployment layered with these packages (standin mode only).
func (c *cli) layer(args []string) error {
	if c.cfg.RealSysroot || len(args) == 0 {
		return usageErr{"standin-layer NAME=EVR...", "standin mode and at least one package"}
	}
	deps, err := c.cfg.loadDeployments()
	if err != nil {
		return err
	}
	deps.Booted.Layered = map[string]string{}
	for _, a := range args {
		n, evr, ok := strings.Cut(a, "=")
		if !ok {
			return usageErr{"standin-layer NAME=EVR...", "bad package " + a}
		}
		deps.Booted.Layered[n] = evr
	}
	return writeJSON(c.cfg.deploymentsFile(), deps)
}

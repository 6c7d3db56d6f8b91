package standin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Container origins. The stand-in has no registry: an image is an ostree
// ref of the update repo, named "<remote>/<ref>" as the bootc stand-in
// names them (imageOf), one layer per image; a tag is the ref's last
// element ("<remote>/os:stable" is the ref os/stable), and an image's
// digest is its commit's (imageDigest), found in the ref's history. A
// container deployment records the image reference (Dep.Image) and the
// ref backing it (Dep.Origin).

// imageSigs are ostree-ext's OstreeImageReference signature prefixes
// (bootc-dev/bootc crates/ostree-ext/src/container/mod.rs, SignatureSource);
// ostree-remote-image and ostree-remote-registry carry a remote name.
var imageSigs = []string{"ostree-image-signed:", "ostree-unverified-image:", "ostree-unverified-registry:",
	"ostree-remote-image:", "ostree-remote-registry:"}

// imageBacking returns the ostree refspec backing a container image
// reference, ok false for a refspec that is not one (refspec_classify,
// coreos/rpm-ostree rust/src/core.rs).
func imageBacking(ref string) (string, bool, error) {
	rest := ""
	for _, p := range imageSigs {
		if r, ok := strings.CutPrefix(ref, p); ok {
			rest = r
			if strings.HasPrefix(p, "ostree-remote-") {
				_, rest, _ = strings.Cut(r, ":")
			}
			break
		}
	}
	if rest == "" {
		return "", false, nil
	}
	// The -registry forms imply the registry transport; the others name it.
	rest = strings.TrimPrefix(strings.TrimPrefix(rest, "docker://"), "registry:")
	remote, name, ok := strings.Cut(rest, "/")
	if n, tag, tagged := strings.Cut(name, ":"); tagged && n != "" && tag != "" && !strings.Contains(tag, "/") {
		name = n + "/" + tag
	}
	if !ok || remote == "" || strings.ContainsAny(remote+name, "@:") {
		return "", true, fmt.Errorf("the stand-in follows images named <remote>/<ref> or <remote>/<name>:<tag> over the registry transport, not %s", ref)
	}
	return remote + ":" + name, true, nil
}

// isDigest says whether rev is an image digest ("sha256:<64 hex>").
func isDigest(rev string) bool {
	h, ok := strings.CutPrefix(rev, "sha256:")
	return ok && isChecksum(h)
}

// historyDepth bounds the walk for a digest down a ref's history.
const historyDepth = 200

// resolveDigest finds the commit of t's ref whose image digest is digest,
// walking the ref's parents as a registry keeps a repository's manifests:
// what `deploy DIGEST` and `rebase IMAGE DIGEST` pull on a container
// origin (upstream sets the digest as the origin's override commit,
// coreos/rpm-ostree src/daemon/rpmostreed-transaction-types.cxx,
// apply_revision_override).
func (d *Daemon) resolveDigest(ctx context.Context, t target, digest string) (target, error) {
	cur := t.csum
	for range historyDepth {
		if imageDigest(cur) == digest {
			t.csum = cur
			return t, nil
		}
		p, err := d.ostree.revParse(ctx, t.src, cur+"^")
		if err != nil {
			break // the ref's first commit
		}
		cur = p
	}
	return target{}, fmt.Errorf("Fetching manifest %s@%s: manifest unknown", t.ref, digest)
}

// ManifestDiff is the layer diff of a container update: the cached
// update's "manifest-diff" (coreos/rpm-ostree rust/src/deployment_utils.rs,
// deployment_add_manifest_diff).
type ManifestDiff struct {
	Total       uint64 `json:"total"`
	TotalSize   uint64 `json:"total-size"`
	NRemoved    uint64 `json:"n-removed"`
	RemovedSize uint64 `json:"removed-size"`
	NAdded      uint64 `json:"n-added"`
	AddedSize   uint64 `json:"added-size"`
}

// checkKeyLen is rpmostree_print_cached_update's max_key_len:
// MAX (strlen ("SecAdvisories"), strlen ("GPGSignature")).
const checkKeyLen = len("SecAdvisories")

// formatCheck prints the "AvailableUpdate:" block as
// rpmostree_print_cached_update and rpmostree_print_manifest_diff do
// (coreos/rpm-ostree src/app/rpmostree-clientlib.cxx): Version and Commit
// only for a new base commit ("ref-has-new-commit"), the layer diff for a
// container origin. "Removed layers" is printed with one leading space,
// as upstream's printf (" %*s%s %" G_GUINT64_FORMAT).
func formatCheck(u UpdateInfo) string {
	var b strings.Builder
	b.WriteString("AvailableUpdate:\n")
	kv := func(lead, k, v string) { fmt.Fprintf(&b, "%s%*s: %s\n", lead, checkKeyLen, k, v) }
	if m := u.Layers; m != nil {
		kv("  ", "Total layers", fmt.Sprint(m.Total))
		kv("  ", "Size", formatSize(m.TotalSize))
		kv(" ", "Removed layers", fmt.Sprint(m.NRemoved))
		kv("  ", "Size", formatSize(m.RemovedSize))
		kv("  ", "Added layers", fmt.Sprint(m.NAdded))
		kv("  ", "Size", formatSize(m.AddedSize))
		return b.String()
	}
	if !u.SameBase {
		if u.Version != "" {
			kv("  ", "Version", fmt.Sprintf("%s (%s)", u.Version, fmtTS(u.Timestamp)))
		} else {
			kv("  ", "Timestamp", fmtTS(u.Timestamp))
		}
		kv("  ", "Commit", u.Checksum)
	}
	// The package diff summary (rpmostree_print_diff_advisories), shown
	// for a layered host (coreos/rpm-ostree
	// tests/vmcheck/test-autoupdate-check.sh: "Diff: 1 upgraded").
	if u.Diff != "" {
		kv("  ", "Diff", u.Diff)
	}
	return b.String()
}

// formatSize is GLib's g_format_size (G_FORMAT_SIZE_DEFAULT: SI units,
// one decimal; "N bytes" under 1000).
func formatSize(n uint64) string {
	if n < 1000 {
		if n == 1 {
			return "1 byte"
		}
		return fmt.Sprintf("%d bytes", n)
	}
	v := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB", "PB"} {
		v /= 1000
		if v < 1000 {
			return fmt.Sprintf("%.1f %s", v, u)
		}
	}
	return fmt.Sprintf("%.1f EB", v/1000)
}

// cachedCheck is status's "cached-update" (the daemon's CachedUpdate,
// coreos/rpm-ostree src/daemon/rpmostreed-deployment-utils.cxx,
// rpmostreed_update_generate_variant). For a container origin the daemon
// never resolves the new image: checksum stays the booted commit,
// ref-has-new-commit is false, and only the version and the layer diff
// describe the update.
type cachedCheck struct {
	OSName          string        `json:"osname"`
	Checksum        string        `json:"checksum"`
	Version         string        `json:"version,omitempty"`
	Timestamp       uint64        `json:"timestamp"`
	Origin          string        `json:"origin"`
	GPGEnabled      bool          `json:"gpg-enabled"`
	RefHasNewCommit bool          `json:"ref-has-new-commit"`
	ManifestDiff    *ManifestDiff `json:"manifest-diff,omitempty"`
	// UpdateSHA256 is the booted commit it was computed against: a cached
	// update of another booted deployment is stale.
	UpdateSHA256 string `json:"update-sha256"`
}

func newCachedCheck(booted Dep, u UpdateInfo) *cachedCheck {
	c := &cachedCheck{OSName: booted.OSName, Origin: booted.Origin, UpdateSHA256: booted.Checksum}
	if booted.Image != "" {
		c.Origin, c.Checksum, c.Timestamp, c.ManifestDiff = booted.Image, booted.Checksum, booted.Timestamp, u.Layers
		c.Version = u.Version
		return c
	}
	c.Checksum, c.Version, c.Timestamp, c.RefHasNewCommit = u.Checksum, u.Version, u.Timestamp, !u.SameBase
	return c
}

// The cached update lives in /var/cache/rpm-ostree/cached-update.gv
// (coreos/rpm-ostree src/libpriv/rpmostree-core.h): it survives a reboot.
func (c Config) cachedCheckFile() string {
	return filepath.Join(c.Sysroot, "ostree", "standin-cached-update.json")
}

func (c Config) saveCachedCheck(u *cachedCheck) error {
	if u == nil {
		if err := os.Remove(c.cachedCheckFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeJSON(c.cachedCheckFile(), u)
}

// loadCachedCheck returns the cached update computed for booted, nil for
// none or a stale one.
func (c Config) loadCachedCheck(booted Dep) (*cachedCheck, error) {
	var u cachedCheck
	ok, err := readJSON(c.cachedCheckFile(), &u)
	if err != nil || !ok || u.UpdateSHA256 != booted.Checksum {
		return nil, err
	}
	return &u, nil
}

// ImageDigest is the digest of the stand-in image whose commit is csum:
// what an update graph's OCI payloads name (tests build graphs from it).
func ImageDigest(csum string) string { return imageDigest(csum) }

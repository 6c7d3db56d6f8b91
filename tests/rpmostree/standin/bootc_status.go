package standin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The stand-in's images are the update repo's refs: the image of a
// deployment whose origin is REMOTE:REF is REMOTE/REF (transport registry),
// and the manifest digest of a commit is derived from its checksum, so the
// digest and the ostree checksum differ, as on a real host.

type bootcImageRef struct {
	Image     string `json:"image"`
	Transport string `json:"transport"`
	Signature string `json:"signature,omitempty"`
}

type bootcImageStatus struct {
	Image        bootcImageRef `json:"image"`
	Version      *string       `json:"version"`
	Timestamp    *string       `json:"timestamp"`
	ImageDigest  string        `json:"imageDigest"`
	Architecture string        `json:"architecture"`
}

type bootcOstree struct {
	Stateroot    string `json:"stateroot"`
	Checksum     string `json:"checksum"`
	DeploySerial int    `json:"deploySerial"`
}

type bootcEntry struct {
	Image             *bootcImageStatus `json:"image"`
	CachedUpdate      *bootcImageStatus `json:"cachedUpdate"`
	Incompatible      bool              `json:"incompatible"`
	Pinned            bool              `json:"pinned"`
	SoftRebootCapable bool              `json:"softRebootCapable"`
	DownloadOnly      bool              `json:"downloadOnly"`
	Store             *string           `json:"store"`
	Ostree            *bootcOstree      `json:"ostree"`
}

type bootcHost struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   map[string]string `json:"metadata"`
	Spec       struct {
		Image     *bootcImageRef `json:"image"`
		BootOrder string         `json:"bootOrder"`
	} `json:"spec"`
	Status struct {
		Staged         *bootcEntry `json:"staged"`
		Booted         *bootcEntry `json:"booted"`
		Rollback       *bootcEntry `json:"rollback"`
		RollbackQueued bool        `json:"rollbackQueued"`
		Type           *string     `json:"type"`
		UsrOverlay     any         `json:"usrOverlay"`
		ReadOnly       bool        `json:"readOnly"`
	} `json:"status"`
}

// bootcOutputFormats are the values of --format: OutputFormat's variants
// under clap's rename_all = "lowercase" (bootc-dev/bootc
// crates/lib/src/cli.rs): "humanreadable", not "humanReadable".
var bootcOutputFormats = []string{"humanreadable", "yaml", "json"}

// imageDisplay is how bootc prints the image it upgrades ("{imgref:#}"):
// an unverified registry image as "docker://NAME" (bootc-dev/bootc
// crates/lib/src/spec.rs, Display for ImageReference, and
// crates/ostree-ext/src/container/mod.rs, Display for
// OstreeImageReference and its test_ostreeimagereference).
func imageDisplay(refspec string) string { return "docker://" + imageOf(refspec).Image }

// imageDigest is the manifest digest the stand-in gives a commit.
func imageDigest(csum string) string {
	h := sha256.Sum256([]byte("standin-image:" + csum))
	return "sha256:" + hex.EncodeToString(h[:])
}

// imageOf is the image a refspec stands for.
func imageOf(refspec string) bootcImageRef {
	remote, ref, _ := strings.Cut(refspec, ":")
	return bootcImageRef{Image: remote + "/" + ref, Transport: "registry", Signature: "insecure"}
}

func imageStatus(refspec, csum, version string, ts uint64) *bootcImageStatus {
	s := &bootcImageStatus{Image: imageOf(refspec), ImageDigest: imageDigest(csum), Architecture: "amd64"}
	if version != "" {
		s.Version = &version
	}
	if ts != 0 {
		t := time.Unix(int64(ts), 0).UTC().Format(time.RFC3339)
		s.Timestamp = &t
	}
	return s
}

// cachedUpdate is what `upgrade --check` found for the booted deployment
// (bootc keeps it in the repo: it survives a reboot).
type cachedUpdate struct {
	Booted   string `json:"booted"` // checksum it was found for
	Checksum string `json:"checksum"`
	Refspec  string `json:"refspec"`
	Version  string `json:"version"`
	TS       uint64 `json:"timestamp"`
}

func (c *bootcCLI) cacheFile() string {
	return filepath.Join(c.cfg.Sysroot, "ostree", "bootc-cached-update.json")
}

func (c *bootcCLI) entry(d Dep, staged *Staged, cached *cachedUpdate) *bootcEntry {
	store := "ostreeContainer"
	e := &bootcEntry{Pinned: d.Pinned, Store: &store,
		Ostree: &bootcOstree{Stateroot: d.OSName, Checksum: d.Checksum, DeploySerial: d.Serial}}
	if !c.packageMode {
		e.Image = imageStatus(d.Origin, d.Checksum, d.Version, d.Timestamp)
	}
	if staged != nil {
		e.DownloadOnly = staged.Locked
	}
	if cached != nil && cached.Booted == d.Checksum && cached.Checksum != d.Checksum {
		e.CachedUpdate = imageStatus(cached.Refspec, cached.Checksum, cached.Version, cached.TS)
	}
	return e
}

// host builds bootc's status from the deployments.
func (c *bootcCLI) host(ctx context.Context, st store) (*bootcHost, error) {
	deps, staged, err := st.load(ctx)
	if err != nil {
		return nil, err
	}
	var cached cachedUpdate
	if _, err := readJSON(c.cacheFile(), &cached); err != nil {
		return nil, err
	}
	h := &bootcHost{APIVersion: "org.containers.bootc/v1", Kind: "BootcHost", Metadata: map[string]string{"name": "host"}}
	h.Spec.BootOrder = "default"
	h.Status.Booted = c.entry(deps.Booted, nil, &cached)
	if deps.Rollback != nil {
		h.Status.Rollback = c.entry(*deps.Rollback, nil, nil)
	}
	next := deps.Booted
	if staged != nil {
		h.Status.Staged = c.entry(staged.Deployment, staged, nil)
		next = staged.Deployment
	}
	if !c.packageMode {
		img := imageOf(next.Origin)
		h.Spec.Image = &img
		t := "bootcHost"
		h.Status.Type = &t
	}
	return h, nil
}

// status is `bootc status`: JSON only (--json, --format=json); the
// human-readable and YAML renderings are not part of what the agent reads.
func (c *bootcCLI) status(args []string) error {
	const usage = "bootc status [OPTIONS]"
	p, err := bootcOpts(args, usage, []opt{{long: "json"}, {long: "format", arg: true}, {long: "format-version", arg: true},
		{long: "booted"}, {long: "verbose", short: 'v'}})
	if err != nil {
		return err
	}
	if f, ok := p.str("format"); ok && !slices.Contains(bootcOutputFormats, f) {
		return clapErr{fmt.Sprintf("invalid value '%s' for '--format <FORMAT>'", f), usage}
	}
	if v, ok := p.str("format-version"); ok && v != "0" && v != "1" {
		return fmt.Errorf("Status: Unsupported format version: %s", v)
	}
	if f, _ := p.str("format"); f != "json" && !(f == "" && p.has("json")) {
		return fmt.Errorf("Status: the stand-in writes JSON only (--format=json)")
	}
	ctx := context.Background()
	st, _, unlock, err := c.open(ctx)
	if err != nil {
		return fmt.Errorf("Status: %w", err)
	}
	defer unlock()
	h, err := c.host(ctx, st)
	if err != nil {
		return fmt.Errorf("Status: %w", err)
	}
	if p.has("booted") {
		h.Status.Staged, h.Status.Rollback = nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

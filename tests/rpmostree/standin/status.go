package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// statusDeployment has the keys of rpm-ostree's deployment variant that an
// ostree-origin, non-layered deployment carries, and the keys other origins
// and layering add.
type statusDeployment struct {
	ID       string `json:"id"`
	OSName   string `json:"osname"`
	Serial   int    `json:"serial"`
	Checksum string `json:"checksum"`
	// BaseChecksum: a layered deployment's base; Checksum is then its
	// local merge commit, and the base's version and timestamp are
	// "base-version" and "base-timestamp", the merge commit's metadata
	// "layered-commit-meta" (coreos/rpm-ostree
	// src/daemon/rpmostreed-deployment-utils.cxx,
	// rpmostreed_deployment_generate_variant).
	BaseChecksum      string         `json:"base-checksum,omitempty"`
	BaseVersion       string         `json:"base-version,omitempty"`
	BaseTimestamp     uint64         `json:"base-timestamp,omitempty"`
	LayeredCommitMeta map[string]any `json:"layered-commit-meta,omitempty"`
	Version           string         `json:"version,omitempty"`
	Timestamp         uint64         `json:"timestamp"`
	Origin            string         `json:"origin,omitempty"`
	// A container deployment has these instead of "origin"
	// (coreos/rpm-ostree src/daemon/rpmostreed-deployment-utils.cxx).
	ContainerImageReference       string            `json:"container-image-reference,omitempty"`
	ContainerImageReferenceDigest string            `json:"container-image-reference-digest,omitempty"`
	Booted                        bool              `json:"booted"`
	Staged                        bool              `json:"staged"`
	Pinned                        bool              `json:"pinned"`
	Unlocked                      string            `json:"unlocked"`
	GPGEnabled                    bool              `json:"gpg-enabled"`
	RegenerateInitramfs           bool              `json:"regenerate-initramfs"`
	BaseCommitMeta                map[string]any    `json:"base-commit-meta"`
	Packages                      []string          `json:"packages"`
	RequestedPackages             []string          `json:"requested-packages"`
	RequestedLocalPackages        []string          `json:"requested-local-packages"`
	BaseRemovals                  []string          `json:"base-removals"`
	BaseLocalReplacements         []string          `json:"base-local-replacements"`
	BaseRemoteReplacements        map[string]string `json:"base-remote-replacements"`
	RequestedBaseRemovals         []string          `json:"requested-base-removals"`
	Modules                       []string          `json:"modules"`
	RequestedModules              []string          `json:"requested-modules"`
	RequestedModulesEnabled       []string          `json:"requested-modules-enabled"`
	// FinalizationLocked is set, true, on the staged deployment only while
	// the legacy lock file /run/ostree/staged-deployment-locked exists, and
	// absent otherwise (coreos/rpm-ostree rust/src/daemon.rs, "Staging
	// status"). rpm-ostree before 2024.6 wrote that file for a locked
	// staging, as the stand-in does (libostree 2022.7, Debian's, has no
	// other lock); since then libostree >= 2023.8 locks the staging and
	// keeps the lock in /run/ostree/staged-deployment, and the key is
	// absent even for a locked deployment: clients must not depend on it.
	FinalizationLocked bool `json:"finalization-locked,omitempty"`
}

type statusJSON struct {
	Deployments  []statusDeployment `json:"deployments"`
	Transaction  []string           `json:"transaction"`
	CachedUpdate *cachedCheck       `json:"cached-update"`
	UpdateDriver *Driver            `json:"update-driver"`
}

func toStatus(d Dep, booted, staged bool) statusDeployment {
	meta := map[string]any{"ostree.bootable": true}
	if d.Version != "" {
		meta["version"] = d.Version
	}
	e := []string{}
	s := statusDeployment{
		ID: d.ID(), OSName: d.OSName, Serial: d.Serial, Checksum: d.Checksum,
		Version: d.Version, Timestamp: d.Timestamp, Origin: d.Origin,
		Booted: booted, Staged: staged, Pinned: d.Pinned, Unlocked: "none",
		BaseCommitMeta: meta, Packages: e, RequestedPackages: e, RequestedLocalPackages: e,
		BaseRemovals: e, BaseLocalReplacements: e, BaseRemoteReplacements: map[string]string{},
		RequestedBaseRemovals: e, Modules: e, RequestedModules: e, RequestedModulesEnabled: e,
	}
	if len(d.Layered) > 0 {
		names := mapsKeys(d.Layered)
		s.ID = fmt.Sprintf("%s-%s.%d", d.OSName, layeredChecksum(d), d.Serial)
		s.Checksum, s.BaseChecksum, s.RequestedPackages, s.Packages = layeredChecksum(d), d.Checksum, names, names
		s.BaseVersion, s.BaseTimestamp = d.Version, d.Timestamp
		// The merge commit carries the base's version (rpm-ostree's
		// layering keeps it) and marks itself a client layer.
		s.LayeredCommitMeta = map[string]any{"rpmostree.clientlayer": true}
		if d.Version != "" {
			s.LayeredCommitMeta["version"] = d.Version
		}
	}
	if d.Image != "" {
		s.Origin, s.ContainerImageReference, s.ContainerImageReferenceDigest = "", d.Image, imageDigest(d.Checksum)
	}
	return s
}

// status builds `status --json`: staged first, then booted, then rollback.
func (d *Daemon) status() (json.RawMessage, error) {
	deps, staged, err := d.store.load(context.Background())
	if err != nil {
		return nil, err
	}
	drv, err := d.cfg.loadDriver()
	if err != nil {
		return nil, err
	}
	cached, err := d.cfg.loadCachedCheck(deps.Booted)
	if err != nil {
		return nil, err
	}
	st := statusJSON{Deployments: []statusDeployment{}, UpdateDriver: drv, CachedUpdate: cached}
	if staged != nil {
		s := toStatus(staged.Deployment, false, true)
		// Staged.Locked is the legacy lock file on a real sysroot (the
		// only lock libostree 2022.7 has) and the stand-in's own lock
		// record otherwise: what upstream's key reads.
		s.FinalizationLocked = staged.Locked
		st.Deployments = append(st.Deployments, s)
	}
	st.Deployments = append(st.Deployments, toStatus(deps.Booted, true, false))
	if deps.Rollback != nil {
		st.Deployments = append(st.Deployments, toStatus(*deps.Rollback, false, false))
	}
	if t := d.activeTxn(); t != nil {
		st.Transaction = []string{t.method, t.sender, "/org/projectatomic/rpmostree1/" + strings.ReplaceAll(deps.Booted.OSName, "-", "_")}
	}
	return json.MarshalIndent(st, "", "  ")
}

// FormatStatus renders status JSON as rpm-ostree's human output.
func FormatStatus(b []byte, onlyBooted bool) (string, error) {
	var st statusJSON
	if err := json.Unmarshal(b, &st); err != nil {
		return "", err
	}
	var w strings.Builder
	state := "idle"
	if len(st.Transaction) > 0 {
		state = "busy"
	}
	fmt.Fprintf(&w, "State: %s\n", state)
	if st.UpdateDriver != nil {
		fmt.Fprintf(&w, "AutomaticUpdatesDriver: %s (%s)\n", st.UpdateDriver.Name, st.UpdateDriver.Unit)
	}
	fmt.Fprintf(&w, "Deployments:\n")
	for _, d := range st.Deployments {
		if onlyBooted && !d.Booted {
			continue
		}
		mark := " "
		if d.Booted {
			mark = "●"
		}
		if d.ContainerImageReference != "" {
			// The image, then its digest (print_one_deployment,
			// coreos/rpm-ostree src/app/rpmostree-builtin-status.cxx).
			fmt.Fprintf(&w, "%s %s\n", mark, d.ContainerImageReference)
			fmt.Fprintf(&w, "                   Digest: %s\n", d.ContainerImageReferenceDigest)
		} else {
			fmt.Fprintf(&w, "%s %s\n", mark, d.Origin)
		}
		ts := time.Unix(int64(d.Timestamp), 0).UTC().Format(time.RFC3339)
		fmt.Fprintf(&w, "                  Version: %s (%s)\n", d.Version, ts)
		fmt.Fprintf(&w, "                   Commit: %s\n", d.Checksum)
		if d.Staged {
			fmt.Fprintf(&w, "                   Staged: yes\n")
		}
		fmt.Fprintln(&w)
	}
	return w.String(), nil
}

// Package bootc drives image-mode hosts through the bootc CLI: a typed view
// of `bootc status --format=json`, the version check, `upgrade --check`,
// the staging argv (`upgrade --download-only`: staged but finalization
// locked) and the finalize (`upgrade --from-downloaded --apply`). Every call
// is a logged operation (agent/oplog). The contract followed is bootc's
// crates/lib/src/cli.rs and spec.rs (org.containers.bootc/v1); download-only
// appeared in bootc 1.12.0.
package bootc

import (
	"encoding/json"
	"fmt"
)

// APIVersion and Kind identify bootc's host object.
const (
	APIVersion = "org.containers.bootc/v1"
	Kind       = "BootcHost"
)

// Host is `bootc status --format=json`, reduced to what the agent decides on.
type Host struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Spec       HostSpec   `json:"spec"`
	Status     HostStatus `json:"status"`
}

// HostSpec is what the host follows.
type HostSpec struct {
	// Image is nil on a host bootc does not manage (package mode).
	Image *ImageReference `json:"image"`
}

// ImageReference is an image with its transport ("registry", "oci", ...).
type ImageReference struct {
	Image     string `json:"image"`
	Transport string `json:"transport"`
}

func (r *ImageReference) String() string {
	if r == nil {
		return ""
	}
	return r.Transport + ":" + r.Image
}

// HostStatus holds the boot entries.
type HostStatus struct {
	Staged   *BootEntry `json:"staged"`
	Booted   *BootEntry `json:"booted"`
	Rollback *BootEntry `json:"rollback"`
	// Type is "bootcHost" when the host booted a container image.
	Type *string `json:"type"`
}

// BootEntry is one deployment.
type BootEntry struct {
	// Image is nil for a deployment not made from a container image.
	Image *ImageStatus `json:"image"`
	// CachedUpdate is the update the last `upgrade --check` found.
	CachedUpdate *ImageStatus `json:"cachedUpdate"`
	Incompatible bool         `json:"incompatible"`
	Pinned       bool         `json:"pinned"`
	// DownloadOnly: staged with --download-only, finalization locked (not
	// applied on a reboot). Always present since bootc 1.12.
	DownloadOnly bool         `json:"downloadOnly"`
	Ostree       *OstreeEntry `json:"ostree"`
}

// ImageStatus is the image of a deployment.
type ImageStatus struct {
	Image       ImageReference `json:"image"`
	Version     string         `json:"version"`
	Timestamp   string         `json:"timestamp"`
	ImageDigest string         `json:"imageDigest"`
}

// OstreeEntry is the ostree side of a deployment.
type OstreeEntry struct {
	Stateroot    string `json:"stateroot"`
	Checksum     string `json:"checksum"`
	DeploySerial int    `json:"deploySerial"`
}

// ParseStatus decodes `bootc status --format=json`, refusing another kind of
// document (an older API version is accepted: the fields read are the same).
func ParseStatus(b []byte) (*Host, error) {
	var h Host
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("parsing bootc status: %w", err)
	}
	if h.Kind != Kind {
		return nil, fmt.Errorf("parsing bootc status: kind %q, want %q", h.Kind, Kind)
	}
	return &h, nil
}

// Managed reports whether bootc manages this host: it booted a container
// image (bootc's own test for status.type = bootcHost). A package-mode
// rpm-ostree host answers false (booted.image null, or no booted entry).
func (h *Host) Managed() bool {
	return h.Status.Booted != nil && h.Status.Booted.Image != nil
}

// Digest is the identity of a deployment as the agent compares it: its
// image digest; "" when it was not made from an image.
func (e *BootEntry) Digest() string {
	if e == nil || e.Image == nil {
		return ""
	}
	return e.Image.ImageDigest
}

// Version is the image's version label, if any.
func (e *BootEntry) Version() string {
	if e == nil || e.Image == nil {
		return ""
	}
	return e.Image.Version
}

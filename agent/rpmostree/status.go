// Package rpmostree drives the OS through the rpm-ostree CLI: a typed view of
// `status --json`, checking, staging with --lock-finalization, finalizing,
// cleanup and cancel. Every call is a logged operation (agent/oplog).
package rpmostree

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Status is `rpm-ostree status --json`, reduced to what the agent decides on.
type Status struct {
	// Deployments are in boot order: a staged deployment is first.
	Deployments []Deployment `json:"deployments"`
	// Transaction is the running transaction, nil when the daemon is idle.
	Transaction *Transaction `json:"transaction"`
	// UpdateDriver is the registered update driver, nil when none.
	UpdateDriver *UpdateDriver `json:"update-driver"`
	// CachedUpdate is what the last `upgrade --check` found, nil when
	// nothing (CachedUpdate).
	CachedUpdate *CachedUpdate `json:"cached-update"`
}

// CachedUpdate is status's "cached-update" (the daemon's CachedUpdate
// property, coreos/rpm-ostree src/daemon/org.projectatomic.rpmostree1.xml).
// For a container origin Checksum is the booted base commit, not the new
// image's: the image's version is here, its digest nowhere before staging.
type CachedUpdate struct {
	Origin   string `json:"origin"`
	Checksum string `json:"checksum"`
	Version  string `json:"version,omitempty"`
	// RefHasNewCommit: Checksum is a new base commit.
	RefHasNewCommit bool `json:"ref-has-new-commit"`
}

// Deployment is one entry of status's "deployments".
type Deployment struct {
	ID       string `json:"id"`
	OSName   string `json:"osname"`
	Serial   int    `json:"serial"`
	Checksum string `json:"checksum"`
	// BaseChecksum is set only for layered deployments (packages on top of
	// the base commit); Checksum is then the local merge commit.
	BaseChecksum string `json:"base-checksum,omitempty"`
	Version      string `json:"version,omitempty"`
	Timestamp    uint64 `json:"timestamp"`
	// Origin is the ostree refspec ("fedora:fedora/x86_64/coreos/stable")
	// or a checksum; empty for container origins.
	Origin                        string `json:"origin,omitempty"`
	ContainerImageReference       string `json:"container-image-reference,omitempty"`
	ContainerImageReferenceDigest string `json:"container-image-reference-digest,omitempty"`
	Booted                        bool   `json:"booted"`
	Staged                        bool   `json:"staged"`
	Pinned                        bool   `json:"pinned"`
	// FinalizationLocked is informational only: upstream sets it on the
	// staged deployment only while LegacyLockFile exists (coreos/rpm-ostree
	// rust/src/daemon.rs), so since rpm-ostree 2024.6 it is usually absent
	// even for a locked deployment, the lock being in
	// /run/ostree/staged-deployment. The engine records what it locked
	// itself (state.State.Locked); FinalizationLock reads the lock.
	FinalizationLocked *bool `json:"finalization-locked,omitempty"`
	// BaseCommitMeta is the base commit's metadata (the update graph reads
	// the stream from it).
	BaseCommitMeta map[string]any `json:"base-commit-meta,omitempty"`
}

// Transaction is status's "transaction": [method, sender, object path].
type Transaction struct {
	Method string
	Sender string
	Path   string
}

// UnmarshalJSON reads the (sss) tuple rpm-ostree serializes as an array.
func (t *Transaction) UnmarshalJSON(b []byte) error {
	var a []string
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("transaction: %w", err)
	}
	if len(a) != 3 {
		return fmt.Errorf("transaction: want 3 elements, got %d", len(a))
	}
	t.Method, t.Sender, t.Path = a[0], a[1], a[2]
	return nil
}

// MarshalJSON writes the tuple form, so a Status round-trips.
func (t Transaction) MarshalJSON() ([]byte, error) {
	return json.Marshal([]string{t.Method, t.Sender, t.Path})
}

// UpdateDriver is status's "update-driver".
type UpdateDriver struct {
	Name string `json:"driver-name"`
	Unit string `json:"driver-sd-unit"`
}

// ParseStatus decodes `rpm-ostree status --json` output.
func ParseStatus(b []byte) (*Status, error) {
	var st Status
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parsing rpm-ostree status: %w", err)
	}
	return &st, nil
}

// Booted returns the booted deployment, or false when none is marked booted
// (not a booted ostree system).
func (s *Status) Booted() (Deployment, bool) {
	for _, d := range s.Deployments {
		if d.Booted {
			return d, true
		}
	}
	return Deployment{}, false
}

// Staged returns the staged deployment. Only deployments[0] can be staged.
func (s *Status) Staged() (Deployment, bool) {
	if len(s.Deployments) > 0 && s.Deployments[0].Staged {
		return s.Deployments[0], true
	}
	return Deployment{}, false
}

// IsContainer reports whether the deployment follows a container image.
func (d Deployment) IsContainer() bool { return d.ContainerImageReference != "" }

// ErrNoDigest is returned for a container deployment whose status lacks the
// image digest (rpm-ostree treats reading it as non-fatal).
var ErrNoDigest = errors.New("container deployment has no image digest in status")

// FinalizeChecksum is what `finalize-deployment` expects for d: the image
// digest for a container origin, else the base commit (base-checksum for a
// layered deployment, checksum otherwise).
func (d Deployment) FinalizeChecksum() (string, error) {
	if d.IsContainer() {
		if d.ContainerImageReferenceDigest == "" {
			return "", fmt.Errorf("deployment %s: %w", d.ID, ErrNoDigest)
		}
		return d.ContainerImageReferenceDigest, nil
	}
	if d.BaseChecksum != "" {
		return d.BaseChecksum, nil
	}
	return d.Checksum, nil
}

// Target is the identity of an OS version as the agent compares it: the
// image digest for containers, else the base commit.
func (d Deployment) Target() string {
	c, _ := d.FinalizeChecksum()
	return c
}

package config

// Update sources.
const (
	SourceOrigin = "origin" // rpm-ostree upgrade: follow the booted origin
	SourceImage  = "image"  // rpm-ostree rebase to Updates.Image
)

// Updates says what to update to.
type Updates struct {
	Enabled bool `toml:"enabled"`
	// Source is "origin", "image" or "graph".
	Source string `toml:"source"`
	// Image is the container image reference used when Source is "image",
	// with its ostree transport ("ostree-unverified-registry:...").
	Image string `toml:"image"`
	// AllowDowngrade lets an update move to an older version.
	AllowDowngrade bool `toml:"allow_downgrade"`
	// MaxAttempts is how many times one target may fail before it is set
	// aside and reported instead of retried.
	MaxAttempts int `toml:"max_attempts"`
	// Backend is the tool that stages and applies updates: BackendAuto,
	// BackendRPMOstree or BackendBootc.
	Backend string `toml:"backend"`
	// MaskBootcTimer: the operator's consent to mask bootc's own update
	// timer (bootc-fetch-apply-updates) until the next boot, at every
	// start; without it the agent refuses to run while that timer is
	// enabled or active (it would reboot the host without a slot).
	MaskBootcTimer bool `toml:"mask_bootc_timer"`
}

// Update backends (updates.backend).
const (
	// BackendAuto: bootc when bootc manages the host (it booted a
	// container image) and updates.source is "origin", else rpm-ostree.
	BackendAuto      = "auto"
	BackendRPMOstree = "rpm-ostree"
	// BackendBootc: bootc upgrade --download-only, then --from-downloaded
	// --apply (bootc >= 1.12).
	BackendBootc = "bootc"
)

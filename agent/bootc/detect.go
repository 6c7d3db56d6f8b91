package bootc

import (
	"errors"
	"fmt"
)

// Backends, as updates.backend names them.
const (
	BackendAuto      = "auto"
	BackendRPMOstree = "rpm-ostree"
	BackendBootc     = "bootc"
)

// Probe is what detection learned of the host: whether the bootc binary is
// installed, and its status (or why it could not be read).
type Probe struct {
	Installed bool
	Host      *Host
	Err       error
}

// Choose decides the backend. A configured one is kept (bootc must then be
// installed). "auto" picks bootc when bootc manages the host (it booted a
// container image: status.booted.image, bootc's own test for
// status.type = bootcHost) and the update source is "origin" (bootc
// follows the booted image; other sources need rpm-ostree's rebase or
// deploy); otherwise rpm-ostree. A bootc that is installed but cannot say
// is an error, not a guess. reason says why, for the log and doctor.
func Choose(configured, source string, p Probe) (backend, reason string, err error) {
	switch configured {
	case BackendRPMOstree:
		return BackendRPMOstree, "configured (updates.backend)", nil
	case BackendBootc:
		if !p.Installed {
			return "", "", errors.New("updates.backend is \"bootc\" but bootc is not installed (agent.bootc)")
		}
		return BackendBootc, "configured (updates.backend)", nil
	case BackendAuto:
	default:
		return "", "", fmt.Errorf("unknown updates.backend %q", configured)
	}
	switch {
	case !p.Installed:
		return BackendRPMOstree, "bootc is not installed", nil
	case p.Err != nil:
		return "", "", fmt.Errorf("choosing the update backend (updates.backend = \"auto\"): %w; set updates.backend", p.Err)
	case p.Host == nil || !p.Host.Managed():
		return BackendRPMOstree, "bootc does not manage this host (no booted container image)", nil
	case source != "origin":
		return BackendRPMOstree, fmt.Sprintf("bootc manages this host, but updates.source = %q needs rpm-ostree", source), nil
	}
	return BackendBootc, "bootc manages this host (booted " + p.Host.Status.Booted.Image.Image.Image + ")", nil
}

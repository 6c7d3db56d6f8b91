package txn

import "github.com/update-agent/update-agent/agent/rpmostree"

// Companion mode (staging.pace_foreign): the agent paces every rpm-ostreed
// transaction that writes a deployment, whoever started it.

// writesDeployment are the org.projectatomic.rpmostree1.OS methods (status
// --json's transaction[0] is the D-Bus method name) that pull and write a
// new deployment: coreos/rpm-ostree src/daemon/org.projectatomic.rpmostree1.xml
// and the CLI's callers in src/app (upgrade/update: Upgrade or
// AutomaticUpdateTrigger; deploy: Deploy; rebase: Rebase;
// install/uninstall: PkgChange; override, reset, and each of these with
// options, through rpmostree-clientlib.cxx: UpdateDeployment; initramfs,
// initramfs-etc and kargs write a new deployment too). Not counted:
// FinalizeDeployment (unlocks a deployment already written), Rollback and
// Cleanup (no new deployment), RefreshMd and the read-only queries.
var writesDeployment = map[string]bool{
	"Upgrade":                true,
	"AutomaticUpdateTrigger": true, // stages under AutomaticUpdatePolicy=stage; a check is paced briefly
	"Deploy":                 true,
	"Rebase":                 true,
	"PkgChange":              true,
	"UpdateDeployment":       true,
	"SetInitramfsState":      true,
	"InitramfsEtc":           true,
	"KernelArgs":             true,
}

// WritesDeployment says whether a transaction of this method writes a
// deployment (and so is paced in companion mode).
func WritesDeployment(method string) bool { return writesDeployment[method] }

// ForeignStep is what the companion loop does after one look at status.
type ForeignStep int

const (
	// ForeignIdle: no window, none to open.
	ForeignIdle ForeignStep = iota
	// ForeignOpen: a deployment-writing transaction runs and no window is
	// open: open one around it.
	ForeignOpen
	// ForeignKeep: the paced transaction still runs.
	ForeignKeep
	// ForeignClose: the paced transaction is gone (ended, or another took
	// its place: the next look opens a window for that one).
	ForeignClose
)

func (s ForeignStep) String() string { return [...]string{"idle", "open", "keep", "close"}[s] }

// DecideForeign is the pure core of companion mode: active is status's
// transaction (nil: the daemon is idle), paced the one a window is open
// for (nil: none).
func DecideForeign(active, paced *rpmostree.Transaction) ForeignStep {
	if paced != nil {
		if active != nil && *active == *paced {
			return ForeignKeep
		}
		return ForeignClose
	}
	if active != nil && WritesDeployment(active.Method) {
		return ForeignOpen
	}
	return ForeignIdle
}

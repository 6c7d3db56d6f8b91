package rpmostree

// LockRecord is the agent's own record of the staged deployment it staged
// with --lock-finalization. rpm-ostree's status cannot be trusted for this
// (the finalization-locked key is usually absent), and a staging call that
// finds its target already staged prints "No change." without locking it.
type LockRecord struct {
	// DeploymentID is status's id of the deployment right after staging.
	DeploymentID string `json:"deployment_id"`
	// Checksum is the deployment's FinalizeChecksum.
	Checksum string `json:"checksum"`
	// BootID is /proc/sys/kernel/random/boot_id when it was staged: staged
	// deployments and their locks live in /run and die with the boot, so a
	// record from another boot proves nothing.
	BootID string `json:"boot_id"`
}

// StagedNotLockedByUs returns the staged deployment when there is one that
// the agent cannot prove it locked in this boot. Such a deployment would be
// applied by any reboot (a power cut, an admin's `systemctl reboot`), so it
// must be removed with `cleanup -p` before staging again.
func StagedNotLockedByUs(st *Status, rec *LockRecord, bootID string) (Deployment, bool) {
	d, ok := st.Staged()
	if !ok {
		return Deployment{}, false
	}
	if rec == nil || rec.BootID == "" || rec.BootID != bootID {
		return d, true
	}
	if rec.DeploymentID != d.ID || rec.Checksum != d.Target() {
		return d, true
	}
	return Deployment{}, false
}

// StagedChanged reports whether a staging call made a new staged deployment,
// from status before and after it: for callers that ran StageArgv where its
// stdout is out of reach (a transient unit) and the verb (rebase) has no
// --unchanged-exit-77. A new deployment has a new id (the serial changes
// even for the same commit).
func StagedChanged(before, after *Status) bool {
	a, ok := after.Staged()
	if !ok {
		return false
	}
	b, ok := before.Staged()
	return !ok || b.ID != a.ID
}

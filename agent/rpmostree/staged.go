package rpmostree

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

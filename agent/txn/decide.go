// Package txn decides what to do about a transaction rpm-ostreed is running
// when the agent is about to stage: go on, wait for it, or cancel it.
//
// rpm-ostreed runs one transaction at a time and keeps it running when its
// client dies: an agent SIGKILLed during `rpm-ostree deploy` leaves the
// deploy running, and the next staging attempt would fail with
// "Transaction in progress". A transaction the agent started in an earlier
// life (its staging record says so) is cancelled with `rpm-ostree cancel`;
// one somebody else started (an operator's `rpm-ostree install`) is waited
// for, never cancelled, and a staging that finds it still running is
// "busy", not a failure.
package txn

import (
	"fmt"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

// Kind is what to do about the daemon's transaction.
type Kind int

const (
	// Go: the daemon is idle; stage.
	Go Kind = iota
	// Wait: somebody else's transaction runs; look again in a while.
	Wait
	// Cancel: the transaction is one an earlier agent process started.
	Cancel
	// Busy: somebody else's transaction still runs after the bound: the
	// attempt ends as busy (not a failure of the update).
	Busy
)

func (k Kind) String() string { return [...]string{"go", "wait", "cancel", "busy"}[k] }

// Input is what the decision sees.
type Input struct {
	// Active is status --json's "transaction"; nil when the daemon is idle.
	Active *rpmostree.Transaction
	// Record is the staging record an agent process left (nil: none).
	Record *Record
	// RecordLive: the process that wrote Record still runs (another agent
	// process, e.g. stage-once beside the daemon, is staging now).
	RecordLive bool
	// BootID is the current boot's: transactions do not outlive a boot.
	BootID string
	// Waited is how long this attempt has waited already; Bound how long
	// it may wait for somebody else's transaction.
	Waited, Bound time.Duration
}

// Decision is what to do, why, and whether the record is stale.
type Decision struct {
	Kind   Kind
	Reason string
	// Forget: the record describes no running transaction any more (it
	// ended, or the record is of an earlier boot): remove it.
	Forget bool
}

// Decide is the pure core. A transaction is ours from an earlier life when
// a record left by a process that is gone, written in this boot, names the
// method rpm-ostreed shows for it (Deploy, Upgrade or Rebase: the agent's
// argv decides which; an operator's install is PkgChange, and a registered
// update driver refuses operators' deploy/upgrade/rebase).
func Decide(in Input) Decision {
	orphan := in.Record != nil && !in.RecordLive
	if in.Active == nil {
		return Decision{Kind: Go, Reason: "rpm-ostree is idle", Forget: orphan}
	}
	ours := orphan && in.Record.BootID == in.BootID && in.Active.Method == in.Record.Method
	if ours {
		return Decision{Kind: Cancel, Reason: fmt.Sprintf("rpm-ostree still runs the %s transaction of an agent process that is gone (pid %d, started %s: %s): cancelling it",
			in.Active.Method, in.Record.PID, in.Record.Started.UTC().Format(time.RFC3339), strings.Join(in.Record.Argv, " "))}
	}
	d := Decision{Forget: orphan} // ours ended; this one is somebody else's
	what := describe(in.Active)
	if in.Waited < in.Bound {
		d.Kind, d.Reason = Wait, fmt.Sprintf("rpm-ostree is busy with %s, which the agent did not start: waiting up to %s for it to end", what, in.Bound)
		return d
	}
	d.Kind, d.Reason = Busy, fmt.Sprintf("rpm-ostree is busy with %s, which the agent did not start", what)
	if in.Bound > 0 {
		d.Reason += fmt.Sprintf(", still running after %s", in.Bound)
	}
	return d
}

func describe(t *rpmostree.Transaction) string {
	s := "a " + t.Method + " transaction"
	if t.Sender != "" {
		s += " (client " + t.Sender + ")"
	}
	return s
}

// MethodOf is the D-Bus method rpm-ostreed shows in status for a staging
// command line (rpmostree.Client.StageArgv): upstream's CLI calls Deploy,
// Upgrade or Rebase for these verbs when no packages change. "" when argv
// is not one of them.
func MethodOf(argv []string) string {
	for _, a := range argv {
		switch a {
		case "deploy":
			return "Deploy"
		case "upgrade", "update":
			return "Upgrade"
		case "rebase":
			return "Rebase"
		}
	}
	return ""
}

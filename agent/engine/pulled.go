package engine

import (
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/state"
)

// PulledRelease is implemented by the error a check returns when its
// source no longer offers the release staged on the host (Fedora pulls a
// broken release by taking it, or the edges to it, out of the update
// graph: graph.PulledError). Only a source that knows the booted release's
// edges can say so: for rpm-ostree or bootc, an empty check means "nothing
// newer", never "pulled". The engine takes it for a check that succeeded
// (Checked.Pulled), not for a failure to check.
type PulledRelease interface {
	error
	// PulledChecksum names the release as Deployment.Checksum does.
	PulledChecksum() string
}

// Pulled is the release a check found pulled, and what the source said.
type Pulled struct {
	Checksum string
	Message  string
}

// checked is the event of a check that returned t, err.
func checked(t *state.Target, err error) Checked {
	var p PulledRelease
	if errors.As(err, &p) {
		return Checked{Target: t, Pulled: &Pulled{Checksum: p.PulledChecksum(), Message: err.Error()}}
	}
	return Checked{Target: t, Err: err}
}

// pulledStaged gives up the staged release its source pulled: it is set
// aside (not staged again unless an operator runs update-now while the
// source offers it) and its staged deployment is discarded, so that no
// reboot applies it.
func (d *decider) pulledStaged(p *Pulled) Action {
	d.setAsidePulled(p)
	d.st.Phase, d.st.Locked = state.Idle, ""
	return Action{Kind: ActCleanup, Reason: p.Message + ": setting it aside and discarding its staged deployment"}
}

// checkedHoldingSlot: the check right after the slot was granted, before
// the pre-reboot hooks (the wait in line may have been long). A pulled
// release gives the slot back, its staged deployment discarded first
// (release); anything else goes on to the last checks: the release was
// offered before queueing, and a graph that cannot be reached now does not
// hold the reboot.
func (d *decider) checkedHoldingSlot(ev Checked) Action {
	if ev.Pulled == nil || ev.Pulled.Checksum != d.st.Locked || d.st.Locked == "" {
		why := "checking etcd quorum and health before the pre-reboot hooks"
		if ev.Err != nil {
			why = fmt.Sprintf("could not check that the update source still offers the staged release (%v); %s", ev.Err, why)
		}
		return Action{Kind: ActPrecheck, Reason: why}
	}
	d.setAsidePulled(ev.Pulled)
	d.st.Phase, d.st.Locked = state.Releasing, ""
	act := d.release()
	if act.Kind == ActRelease {
		act.Withdraw = true
	}
	act.Reason = ev.Pulled.Message + ": setting it aside; " + act.Reason
	return act
}

// setAsidePulled records p's release as set aside, no failure counted.
func (d *decider) setAsidePulled(p *Pulled) {
	if d.st.Failures == nil {
		d.st.Failures = map[string]state.Failure{}
	}
	f := d.st.Failures[p.Checksum]
	f.SetAside, f.Last, f.LastError = true, d.now, p.Message
	d.st.Failures[p.Checksum] = f
	d.st.NextCheck = d.nextCheck()
	d.st.LastError = p.Message + "; set aside"
}

// setAsideWhy says why f set its target aside: failures, or its source
// pulling it (no failure counted).
func setAsideWhy(f state.Failure) string {
	if f.Count == 0 {
		return "set aside (" + f.LastError + ")"
	}
	return fmt.Sprintf("set aside after %d failures (last: %s)", f.Count, f.LastError)
}

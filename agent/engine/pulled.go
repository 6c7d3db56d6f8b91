package engine

import (
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/state"
)

// ErrPulled: the update source withdrew the staged release.
var ErrPulled = errors.New("the staged release was pulled")

// PulledError is what a check returns when its source no longer offers the
// release staged on the host (Fedora pulls a broken release by taking it,
// or the edges to it, out of the update graph). Only a source that knows
// the booted release's edges can say so: for rpm-ostree or bootc, an empty
// check means "nothing newer", never "pulled". The engine takes it for a
// check that succeeded (Checked.Pulled), not for a failure to check.
type PulledError struct {
	Checksum, Version string
	// Why says what the source found (which graph, which booted release).
	Why string
}

func (e *PulledError) Error() string {
	return fmt.Sprintf("release %s (%s) was pulled: %s", e.Version, e.Checksum, e.Why)
}

func (e *PulledError) Is(target error) bool { return target == ErrPulled }

// checked is the event of a check that returned t, err.
func checked(t *state.Target, err error) Checked {
	var p *PulledError
	if errors.As(err, &p) {
		return Checked{Target: t, Pulled: p}
	}
	return Checked{Target: t, Err: err}
}

// pulledStaged gives up the staged release its source pulled: it is set
// aside (never staged again unless an operator runs update-now, or the
// source offers it and update-now asks) and its staged deployment is
// discarded, so that no reboot applies it.
func (d *decider) pulledStaged(p *PulledError) Action {
	if d.st.Failures == nil {
		d.st.Failures = map[string]state.Failure{}
	}
	f := d.st.Failures[p.Checksum]
	f.SetAside, f.Last, f.LastError = true, d.now, p.Error()
	d.st.Failures[p.Checksum] = f
	d.st.Phase, d.st.Locked, d.st.NextCheck = state.Idle, "", d.nextCheck()
	d.st.LastError = p.Error() + "; set aside"
	return Action{Kind: ActCleanup, Reason: p.Error() + ": setting it aside and discarding its staged deployment"}
}

// setAsideWhy says why f set its target aside: failures, or its source
// pulling it (no failure counted).
func setAsideWhy(f state.Failure) string {
	if f.Count == 0 {
		return "set aside (" + f.LastError + ")"
	}
	return fmt.Sprintf("set aside after %d failures (last: %s)", f.Count, f.LastError)
}

package engine

import (
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// AlertMetrics is what an operator alerts on; a Metrics that implements it
// gets it too (optional, so other Metrics need not change).
type AlertMetrics interface {
	// CheckSucceeded: a check for updates succeeded at `at`.
	CheckSucceeded(at time.Time)
	// StateRecorded: the current state was entered at since (the record's
	// Since); setAside targets are set aside after repeated failures.
	StateRecorded(since time.Time, setAside int)
}

// recordAlerting feeds AlertMetrics, when the Metrics port has it.
func (e *Engine) recordAlerting(st state.State, ev Event) {
	am, ok := e.o.Metrics.(AlertMetrics)
	if !ok {
		return
	}
	if c, ok := ev.(Checked); ok && c.Err == nil {
		am.CheckSucceeded(e.o.Clock.Now())
	}
	am.StateRecorded(st.Since, setAside(st))
}

// setAside counts the targets set aside in the record.
func setAside(st state.State) int {
	n := 0
	for _, f := range st.Failures {
		if f.SetAside {
			n++
		}
	}
	return n
}

package engine

import (
	"fmt"
	"time"

	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/state"
)

// record publishes a decision: log, metrics, status, snapshot.
func (e *Engine) record(prev, st state.State, ev Event, act Action, obs Obs) {
	// Every decision, for debugging (and the golden traces of FLOW.md).
	e.log.Debug("decision", "state", prev.Phase, "event", ev.eventName(), "next_state", st.Phase, "action", act.Kind, "reason", act.Reason)
	if act.Failed != "" {
		f := st.Failures[st.Target.Checksum]
		attrs := []any{"step", act.Failed, "state", st.Phase, "target_checksum", st.Target.Checksum,
			"failures", f.Count, "set_aside", f.SetAside, "retry_at", f.RetryAt, "err", f.LastError}
		if f.SetAside {
			attrs = append(attrs, logging.MessageID(logging.IDSetAside))
		}
		e.log.Error("update step failed", attrs...)
		if e.o.Metrics != nil {
			e.o.Metrics.Failed(act.Failed)
		}
	}
	if st.LastError != "" && st.LastError != prev.LastError && act.Failed == "" {
		e.log.Warn(st.LastError, "state", st.Phase, "target_checksum", st.Target.Checksum, "event", ev.eventName())
	}
	if prev.Phase != st.Phase {
		attrs := []any{"from", prev.Phase, "state", st.Phase, "target_checksum", st.Target.Checksum, "event", ev.eventName()}
		if id := transitionMessageID(prev.Phase, st.Phase, act.Failed); id != "" {
			attrs = append(attrs, logging.MessageID(id))
		}
		e.log.Info("state changed", attrs...)
	}
	if e.o.Metrics != nil {
		e.o.Metrics.SetPhase(st.Phase)
	}
	e.recordAlerting(st, ev)
	e.show(st, act, obs)
}

func (e *Engine) show(st state.State, act Action, obs Obs) {
	line := fmt.Sprintf("%s: %s", st.Phase, act.Reason)
	if act.Reason == "" {
		line = fmt.Sprintf("%s: %s", st.Phase, act.Kind)
	}
	var w time.Time
	if win := e.o.Policy.Window; win != nil {
		w = win.Next(e.o.Clock.Now())
	}
	e.mu.Lock()
	changed := line != e.lastShown
	e.lastShown = line
	e.snap = Snapshot{State: st.Clone(), Action: act, OS: obs.OS, BootID: obs.BootID, NextWindow: w, UpdateNow: e.updateNow, At: e.o.Clock.Now()}
	e.mu.Unlock()
	if !changed {
		return
	}
	attrs := []any{"state", st.Phase, "action", act.Kind, "target_checksum", st.Target.Checksum}
	if act.Kind == ActWait {
		attrs = append(attrs, "wait_reason", act.Reason, "until", act.Until)
	} else {
		attrs = append(attrs, "reason", act.Reason)
	}
	e.log.Info(line, attrs...)
	if e.o.Status != nil {
		e.o.Status(line)
	}
}

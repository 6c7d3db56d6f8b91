package doctor

import (
	"context"
	"fmt"

	"github.com/update-agent/update-agent/agent/txn"
)

// companion is the "companion mode" line (updates.enabled = false): off,
// or on with what rpm-ostree runs now and whether that is paced.
func (d Doctor) companion(ctx context.Context) (string, error) {
	if !d.In.PaceForeign {
		return "off (staging.pace_foreign = false): the agent neither updates this host nor paces other updaters' rpm-ostree transactions", nil
	}
	s := "on (staging.pace_foreign = true, updates.enabled = false): the agent updates nothing; it opens the staging window around every rpm-ostree transaction that writes a deployment, whoever starts it"
	if d.CompanionTrigger != nil {
		dir, err := d.CompanionTrigger(ctx)
		s += triggerNote(d.In.DaemonUnit, dir, err)
	}
	st, err := d.OS.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("%s; rpm-ostree's transaction unreadable: %w", s, err)
	}
	if dr := st.UpdateDriver; dr != nil {
		s += fmt.Sprintf("; update driver %s (%s)", dr.Name, dr.Unit)
	}
	switch t := st.Transaction; {
	case t == nil:
		s += "; rpm-ostree is idle"
	case txn.WritesDeployment(t.Method):
		s += fmt.Sprintf("; now running: %s (client %s), paced", t.Method, t.Sender)
	default:
		s += fmt.Sprintf("; now running: %s (client %s), not paced: it writes no deployment", t.Method, t.Sender)
	}
	return s, nil
}

// triggerNote says where the trigger reads, or that it is off: not a
// failure, the poll still finds every transaction, only later.
func triggerNote(unit, dir string, err error) string {
	if err != nil {
		return fmt.Sprintf("; the trigger is off (%s's cgroup not found: %v): rpm-ostree status every 5 s alone finds transactions", unit, err)
	}
	return fmt.Sprintf("; the trigger watches %s (its memory.stat every 250 ms)", dir)
}

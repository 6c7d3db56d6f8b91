package gates

import (
	"context"
	"regexp"
	"time"

	"github.com/update-agent/update-agent/agent/oplog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Checker gathers every configured gate's input and evaluates them.
type Checker struct {
	// Etcd, when set, is asked for alarms and the group's spacing marker.
	Etcd *clientv3.Client
	// Alertmanager, when set, is asked for firing alerts matching
	// AlertRegexp (nil: any).
	Alertmanager *Alertmanager
	AlertRegexp  *regexp.Regexp
	Commands     []Command
	Runner       oplog.Runner
	// LockPrefix and Group locate the spacing marker; MinInterval 0 turns
	// spacing off.
	LockPrefix, Group string
	MinInterval       time.Duration
}

// Check evaluates the gates now; each result says what it saw.
func (c *Checker) Check(ctx context.Context) []Result {
	var in Inputs
	if c.Etcd != nil {
		in.AlarmsEnabled = true
		in.Alarms, in.AlarmsErr = Alarms(ctx, c.Etcd)
		if c.MinInterval > 0 {
			in.SpacingEnabled = true
			in.Spacing, in.SpacingErr = ReadSpacing(ctx, c.Etcd, c.LockPrefix, c.Group)
		}
	}
	if c.Alertmanager != nil {
		in.AlertsEnabled = true
		in.AlertRegexp = c.AlertRegexp
		in.Alerts, in.AlertsErr = c.Alertmanager.Alerts(ctx)
	}
	in.Commands = RunCommands(ctx, c.Runner, c.Commands)
	return Evaluate(in)
}

// Released records this node's release for the group's spacing.
func (c *Checker) Released(ctx context.Context, node string) error {
	if c.Etcd == nil {
		return nil
	}
	return MarkReleased(ctx, c.Etcd, c.LockPrefix, c.Group, node, c.MinInterval)
}

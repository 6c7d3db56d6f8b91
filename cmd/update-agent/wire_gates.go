package main

import (
	"fmt"
	"log/slog"
	"regexp"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/systemd"
)

// motdFile is where the reboot notice goes; pam_motd shows /run/motd.d/*.
const motdFile = "/run/motd.d/90-update-agent"

// wireGates builds the reboot gates and the host adapter from the config.
func (a *agent) wireGates() (*adapters.Gates, *adapters.Host, error) {
	c := a.cfg
	chk, err := gateChecker(c, a.root, a.etcd, a.log)
	if err != nil {
		return nil, nil, err
	}
	host := &adapters.Host{Node: a.node, BootDone: adapters.SystemdBootComplete, Log: a.log}
	if c.Reboot.NotifyUsers {
		// The engine waits the delay (Policy.LoggedInDelay); the notice
		// only tells it.
		host.LoggedInDelay = c.Reboot.LoggedInDelay.D()
		host.Notifier = gates.Notifier{
			MOTDFile: rooted(a.root, motdFile), Wall: "/usr/bin/wall", Runner: oplog.Runner{Log: a.log},
			Users: systemd.UserSessions,
		}
	}
	a.gateLog = &adapters.GateLog{}
	return &adapters.Gates{C: chk, Node: a.node, Log: a.log, Seen: a.gateLog, Metrics: a.metrics}, host, nil
}

// gateChecker builds the gates of the config; the daemon and doctor share it.
func gateChecker(c *config.Config, root string, etcd *clientv3.Client, log *slog.Logger) (*gates.Checker, error) {
	chk := &gates.Checker{
		Etcd:       etcd,
		Runner:     oplog.Runner{Log: log},
		LockPrefix: c.Lock.KeyPrefix, Group: c.Lock.Group, MinInterval: c.Lock.MinInterval.D(),
	}
	if g := c.Gates; g.AlertmanagerURL != "" {
		am, err := gates.NewAlertmanager(g.AlertmanagerURL, gates.AlertmanagerTLS{
			CAFile: rooted(root, g.CAFile), CertFile: rooted(root, g.CertFile), KeyFile: rooted(root, g.KeyFile),
		}, g.Timeout.D())
		if err != nil {
			return nil, configError{fmt.Errorf("gates: %w", err)}
		}
		chk.Alertmanager = am
		if g.AlertRegexp != "" {
			if chk.AlertRegexp, err = regexp.Compile(g.AlertRegexp); err != nil {
				return nil, configError{fmt.Errorf("gates.alert_regexp: %w", err)}
			}
		}
	}
	for _, cmd := range c.Gates.Commands {
		chk.Commands = append(chk.Commands, gates.Command{Argv: cmd.Argv, Timeout: cmd.Timeout.D()})
	}
	return chk, nil
}

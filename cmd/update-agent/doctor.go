package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/update-agent/update-agent/agent/doctor"
	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
)

// doctorFailed is doctor's verdict when a check failed: exit 1.
type doctorFailed struct{ n int }

func (e doctorFailed) Error() string { return fmt.Sprintf("doctor: %d check(s) failed", e.n) }

// runDoctor checks, with the merged configuration, what the agent needs
// from this host and its cluster, one line per check.
func runDoctor(env *cmdEnv, args []string) error {
	fs := newFlags(env, "doctor")
	root := fs.String("root", "/", "prefix for every configuration and host path (tests)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, _, err := loadConfig(*root)
	if err != nil {
		return err
	}
	log := logging.New(env.stderr, slog.LevelWarn)
	d := doctor.Doctor{
		In: doctor.Inputs{
			Endpoints:   cfg.Etcd.Endpoints,
			LockEnabled: cfg.Lock.Enabled, LockGroup: cfg.Lock.Group, LockSlots: cfg.Lock.Slots,
			GuardEnabled: cfg.Guard.Enabled, MetricsURL: cfg.Guard.MetricsURL, LocalUnit: cfg.Etcd.LocalUnit,
			StagingPaths: cfg.Staging.Paths, Scheduler: cfg.Staging.Scheduler,
			IOCost: cfg.Staging.IOCost, EtcdIOLatencyTarget: cfg.Staging.EtcdIOLatencyTarget.D(),
		},
		OS:      &rpmostree.Client{Path: cfg.Agent.RPMOstree, Runner: oplog.Runner{Log: log}},
		Cgroups: doctor.SystemdCgroups{Root: *root},
		Disks:   doctor.SysfsDisks{Root: *root},
		IO:      doctor.SysfsIOControl{Root: *root},
		Metrics: doctor.HTTPMetrics{},
	}
	cli, err := etcdclient.New(etcdClientOptions(cfg, *root))
	if err != nil {
		d.Etcd = doctor.NoEtcd{Err: err}
	} else {
		defer cli.Close()
		member := etcdmember.New(cli, memberOptions(cfg, log))
		d.In.MaxLag = member.MaxLag()
		d.Etcd = doctor.EtcdClient{Cli: cli, Member: member, KeyPrefix: cfg.Lock.KeyPrefix}
		d.Lock = doctor.EtcdLock{Cli: cli, Prefix: cfg.Lock.KeyPrefix, Group: cfg.Lock.Group, Slots: cfg.Lock.Slots}
	}
	chk, err := gateChecker(cfg, *root, cli, log)
	if err != nil {
		return err
	}
	d.Gates = chk
	rep := d.Run(context.Background())
	if err := rep.Write(env.stdout); err != nil {
		return err
	}
	if n := rep.Failed(); n > 0 {
		return doctorFailed{n}
	}
	return nil
}

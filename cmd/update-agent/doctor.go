package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/doctor"
	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/owner"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
)

// doctorFailed is doctor's verdict when a check failed: exit 1.
type doctorFailed struct{ n int }

func (e doctorFailed) Error() string { return fmt.Sprintf("doctor: %d check(s) failed", e.n) }

// doctorWaiting is doctor's verdict when nothing failed but the cluster
// holds reboots now (an alarm, an unhealthy member, a gate): exit 3, so a
// script tells "misconfigured" (1) from "waiting" (3).
type doctorWaiting struct{ n int }

func (e doctorWaiting) Error() string {
	return fmt.Sprintf("doctor: no check failed; %d check(s) found reboots held now (WAIT)", e.n)
}

// runDoctor checks, with the merged configuration, what the agent needs
// from this host and its cluster, one line per check.
func runDoctor(env *cmdEnv, args []string) error {
	fs := newFlags(env, "doctor")
	root := fs.String("root", "/", "prefix for every configuration and host path (tests)")
	asJSON := fs.Bool("json", false, "print a JSON array, one object per check: check, result (ok, FAIL, WAIT or SKIP), detail")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, src, err := loadConfig(*root)
	if err != nil {
		return err
	}
	log := logging.New(env.stderr, slog.LevelWarn)
	d := doctor.Doctor{
		In: doctor.Inputs{
			Endpoints:   cfg.Etcd.Endpoints,
			LockEnabled: cfg.Lock.Enabled, LockGroup: cfg.Lock.Group, LockSlots: cfg.Lock.Slots,
			GuardEnabled: cfg.Guard.Enabled, MetricsURL: cfg.Guard.MetricsURL, LocalUnit: cfg.Etcd.LocalUnit,
			LocalProcess: cfg.Etcd.LocalProcess,
			StagingPaths: cfg.Staging.Paths, Scheduler: cfg.Staging.Scheduler, DriverName: driverName,
			Username: cfg.Etcd.Username, MoveLeader: cfg.Leader.MoveLeader,
			Source: cfg.Updates.Source, Image: cfg.Updates.Image,
			StateDir:        rooted(*root, cfg.Agent.StateDir),
			FleetLockListen: cfg.FleetLock.Listen, FleetLockTLS: cfg.FleetLock.CertFile != "",
			IOCost: cfg.Staging.IOCost.Mode(), IOCostModels: iocostOptions(cfg).Models,
			MemoryHigh: memoryHigh(cfg.Staging.MemoryHigh), MemoryHighAuto: cfg.Staging.MemoryHigh == config.MemorySizeAuto,
			EtcdIOLatencyTarget: cfg.Staging.EtcdIOLatencyTarget.D(),
			WriteRateAuto:       cfg.Staging.IOWriteBandwidthMax == config.BandwidthAuto,
			UpdatesDisabled:     !cfg.Updates.Enabled, PaceForeign: cfg.Staging.PaceForeign,
			StagingUnit: stage.DefaultStagingUnit, DaemonUnit: rpmOstreeDaemon,
			IOWeight: uint64(cfg.Staging.IOWeight), IOCostIOWeight: uint64(cfg.Staging.IOCostIOWeight),
			IOCostEtcdIOWeight: uint64(cfg.Staging.IOCostEtcdIOWeight),
			IOCostBrake:        cfg.Guard.IOCostBrake, BrakeFactor: cfg.Guard.LatencyFactor,
		},
		OS:      &rpmostree.Client{Path: cfg.Agent.RPMOstree, Runner: oplog.Runner{Log: log}},
		Cgroups: doctor.SystemdCgroups{Root: *root},
		Disks:   doctor.SysfsDisks{Root: *root},
		IO:      doctor.SysfsIOControl{Root: *root},
	}
	if !d.In.WriteRateAuto {
		d.In.WriteBandwidthMax = uint64(cfg.Staging.IOWriteBandwidthMax)
	}
	if d.Metrics, err = doctorMetrics(cfg, *root); err != nil {
		return configError{err}
	}
	d.Updates = updateSourceProbe{cfg: cfg, root: *root, client: &rpmostree.Client{Path: cfg.Agent.RPMOstree, Runner: oplog.Runner{Log: log}}, log: log}
	eo := etcdClientOptions(cfg, *root)
	cli, err := etcdclient.New(eo)
	if err != nil {
		d.Etcd = doctor.NoEtcd{Err: err}
	} else {
		defer cli.Close()
		member := etcdmember.New(cli, memberOptions(cfg, log))
		d.In.MaxLag = member.MaxLag()
		ec := doctor.EtcdClient{Cli: cli, Member: member, KeyPrefix: cfg.Lock.KeyPrefix}
		if c, err := eo.Config(); err == nil {
			ec.TLS = c.TLS // New built it from these: no error here
		}
		d.Etcd = ec
		d.Lock = doctor.EtcdLock{Cli: cli, Prefix: cfg.Lock.KeyPrefix, Group: cfg.Lock.Group, Slots: cfg.Lock.Slots}
	}
	if !cfg.Lock.Enabled {
		lo, err := newLockOff(cfg, *root, log)
		if err != nil {
			return err
		}
		defer lo.close()
		d.LockOff = lo.Check
	}
	chk, err := gateChecker(cfg, *root, cli, log)
	if err != nil {
		return err
	}
	d.Gates = chk
	d.CompanionTrigger = func(ctx context.Context) (string, error) { return triggerCgroup(ctx, *root) }
	d.Backend = func(ctx context.Context) (string, error) { return describeBackend(ctx, cfg, log) }
	d.Owners = func(ctx context.Context) (string, error) { return describeOwners(ctx, cfg) }
	d.In.SourceFile = src.File("updates.source")
	g, err := config.ReadZincati(*root)
	d.In.HostGraph, d.In.HostGraphFile, d.In.HostGraphErr = g.BaseURL, g.File, err
	d.In.ServeLocalMember, d.In.ServeLocalMemberFile = cfg.FleetLock.ServeLocalMember, src.File("fleetlock.serve_local_member")
	d.In.Zincati = doctor.ZincatiReboots{Strategy: g.Strategy, StrategyFile: g.StrategyFile, FleetLockURL: g.FleetLockURL, FleetLockFile: g.FleetLockFile}
	d.DialFleetLock = dialTCP
	d.MachineConfig = func(context.Context) (string, error) {
		signs, err := owner.MCD{Root: *root, Proc: procRoot(*root)}.Signs()
		if err != nil {
			return "", err
		}
		return owner.DescribeMCD(signs, cfg.Updates.Enabled, src.File("updates.enabled"))
	}
	rep := d.Run(context.Background())
	write := rep.Write
	if *asJSON {
		write = rep.WriteJSON
	}
	if err := write(env.stdout); err != nil {
		return err
	}
	if n := rep.Failed(); n > 0 {
		return doctorFailed{n}
	}
	if n := rep.Waiting(); n > 0 {
		return doctorWaiting{n}
	}
	return nil
}

// dialTCP connects to addr and hangs up: something listens there.
func dialTCP(ctx context.Context, addr string) error {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

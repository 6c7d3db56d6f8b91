package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"syscall"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/doctor"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/systemd"
	"github.com/update-agent/update-agent/agent/txn"
)

// rpmOstreeDaemon is the unit that does the writing for the rpm-ostree CLI.
const rpmOstreeDaemon = "rpm-ostreed.service"

// newClient is the rpm-ostree client of the daemon and stage-once. Staging
// runs in a transient unit, which rpm-ostree would refuse without bypassing
// the registered driver (the agent's own unit).
func newClient(cfg *config.Config, log *slog.Logger) *rpmostree.Client {
	return &rpmostree.Client{Path: cfg.Agent.RPMOstree, Runner: oplog.Runner{Log: log, Interrupt: syscall.SIGINT},
		BypassDriver: true}
}

// stageOptions maps [staging] and [guard] onto agent/stage.
func stageOptions(cfg *config.Config, root, stateDir string, client *rpmostree.Client, log *slog.Logger) stage.Options {
	s, g := cfg.Staging, cfg.Guard
	prio, nice := s.IOSchedulingPriority, s.Nice
	class := s.IOSchedulingClass
	if class == "none" {
		class = ""
	}
	o := stage.Options{
		DaemonUnit: rpmOstreeDaemon,
		Policy: systemd.Policy{
			IOSchedulingClass:    class,
			IOSchedulingPriority: &prio,
			Nice:                 &nice,
			CPUWeight:            s.CPUWeight.String(),
			IOWeight:             uint64(s.IOWeight),
			MemoryHigh:           memoryHigh(s.MemoryHigh),
		},
		MemoryHighAuto:    s.MemoryHigh == config.MemorySizeAuto,
		WriteBandwidthMax: uint64(s.IOWriteBandwidthMax),
		WriteRateAuto:     s.IOWriteBandwidthMax == config.BandwidthAuto,
		WriteRate:         rateConfig(g),
		Paths:             s.Paths,
		Scheduler:         s.Scheduler,
		KeepScheduler:     !s.RestoreScheduler,
		NrRequests:        s.NRRequests,
		MaxSectorsKB:      s.MaxSectorsKB,
		PerObjectFsync:    s.PerObjectFsync,
		Repo:              rooted(root, "/ostree/repo"),
		EtcdUnit:          cfg.Etcd.LocalUnit,
		EtcdLatencyTarget: s.EtcdIOLatencyTarget.D(),
		Environment:       client.StageEnv(),
		OKExitStatuses:    []int{rpmostree.ExitUnchanged}, // "nothing new": the adapter checks what got staged
		Timeout:           s.Timeout.D(),
		StateDir:          stateDir,
		Log:               log,
	}
	if root != "" && root != "/" {
		o.SysRoot = rooted(root, "/sys") // where sysfs is, as for the guard's and iosched's readers
	}
	o.IOCost = iocostOptions(cfg)
	gc, gb := guard.Thresholds{
		LatencyFactor: g.LatencyFactor, ThawFactor: g.ThawFactor, FsyncP99: g.FsyncP99Threshold.D(),
		IOPressurePercent: g.IOPressureThreshold, MinFreeze: g.MinFreeze.D(), MaxFreeze: g.MaxFreeze.D(),
		MinRunShare: g.MinRunShare, MaxTotalPause: g.MaxTotalPause.D(),
	}.Derive()
	// check-config has read the files; one changed since fails the scrapes,
	// which the guard reports.
	metricsTLS, err := guardMetricsTLS(cfg, root)
	if err != nil {
		log.Error("guard.metrics_url: scraping without its TLS files", "err", err)
	}
	o.Guard = stage.GuardOptions{
		Enabled:      g.Enabled,
		MetricsURL:   g.MetricsURL,
		MetricsTLS:   metricsTLS,
		MetricsEvery: g.MetricsInterval.D(),
		IOCostBrake:  g.IOCostBrake,
		Options: guard.Options{Config: gc, Baseline: gb, Interval: g.Interval.D(), Window: g.Window.D(),
			LearnFor: g.LearnPeriod.D(), Log: log},
	}
	if g.IOPressureThreshold > 0 {
		// etcd's own cgroup when known: the stager's stalls do not count there.
		switch {
		case cfg.Etcd.LocalUnit != "":
			o.Guard.PressureUnit = cfg.Etcd.LocalUnit
		case cfg.Etcd.LocalProcess != "":
			o.Guard.PressureCgroup = etcdProcessCgroup(cfg, root)
		default:
			o.Guard.PressureFile = rooted(root, "/proc/pressure/io")
		}
	}
	if o.WriteRateAuto {
		o.WriteBandwidthMax = 0
		if g.FsyncP99Threshold == 0 {
			o.RateLoopFreezeFactor = g.RateLoopLatencyFactor
		}
	}
	if g.Enabled {
		o.BaselineMaxAge = g.BaselineMaxAge.D()
		k := &guard.Keeper{
			Src: &adapters.BaselineInputs{In: guard.Inputs{MetricsURL: g.MetricsURL, TLS: metricsTLS}, Unit: cfg.Etcd.LocalUnit,
				FindCgroup: etcdProcessCgroup(cfg, root), CgroupRoot: rooted(root, "/sys/fs/cgroup")},
			File: filepath.Join(stateDir, "latency-baseline.json"),
			Log:  log,
		}
		if err := k.Load(); err != nil {
			log.Warn("latency baseline: starting afresh", "err", err)
		}
		o.Baseline = k
	}
	return o
}

// memoryHigh is staging.memory_high's fixed bound; "auto" is none here,
// each window choosing its own (stage.Options.MemoryHighAuto).
func memoryHigh(m config.MemorySize) uint64 {
	if m == config.MemorySizeAuto {
		return 0
	}
	return uint64(m)
}

// rateConfig maps [guard]'s rate keys onto the loop; the config's zeros
// (floor share, IO size) are the loop's "off" (negative).
func rateConfig(g config.Guard) guard.RateConfig {
	rc := guard.RateConfig{Target: g.LatencyTarget, ProbeEvery: g.RateProbeInterval.D(),
		Start: uint64(g.RateStart), Min: uint64(g.RateMin), MinShare: g.RateMinShare, IOSize: int64(g.RateIOSizeKiB) << 10}
	if rc.MinShare == 0 {
		rc.MinShare = -1
	}
	if rc.IOSize == 0 {
		rc.IOSize = -1
	}
	return rc
}

// iocostOptions maps staging.iocost* onto agent/stage; the promise is the
// rate loop's target (guard.latency_target).
func iocostOptions(cfg *config.Config) stage.IOCostOptions {
	s := cfg.Staging
	models := map[string]iocost.Model{}
	for _, line := range s.IOCostModels {
		// Validated with the configuration: a bad line never gets here.
		if disk, m, err := iocost.ParseDiskModel(line); err == nil {
			models[disk] = m
		}
	}
	return stage.IOCostOptions{
		Mode:   s.IOCost.Mode(),
		Models: models,
		Targets: iocost.Targets{Promise: cfg.Guard.LatencyTarget, Fixed: s.IOCostLatencyTarget.D(),
			Default: s.IOCostDefaultLatencyTarget.D(), Percentile: s.IOCostPercentile,
			VrateMin: s.IOCostVrateMin, VrateMax: s.IOCostVrateMax},
		IOWeight:     uint64(s.IOCostIOWeight),
		EtcdIOWeight: uint64(s.IOCostEtcdIOWeight),
	}
}

// newStager builds the gentle stager of the daemon and stage-once (one
// builder, so that both stage a graph's release exactly and check it); it
// dials systemd on first use. keeper is the rolling latency baseline the daemon
// keeps while no staging runs (nil without the guard). board, when not
// nil, shows the open window's pacing live (`status`, the metrics).
func newStager(cfg *config.Config, root, stateDir string, client *rpmostree.Client, board *guard.Board, log *slog.Logger) (s *adapters.Stager, keeper *guard.Keeper) {
	o := stageOptions(cfg, root, stateDir, client, log)
	o.Guard.Board = board
	keeper, _ = o.Baseline.(*guard.Keeper)
	runner := oplog.Runner{Log: log}
	image, override := "", ""
	if cfg.Updates.Source == config.SourceImage {
		image = cfg.Updates.Image
	}
	exact := cfg.Updates.Source == config.SourceGraph
	if exact {
		override = rooted(root, rpmostree.BootedOverrideFile)
	}
	return &adapters.Stager{
		Client:         client,
		Image:          image,
		Exact:          exact,
		Override:       override,
		AllowDowngrade: cfg.Updates.AllowDowngrade,
		Txn: &txn.Settler{Daemon: client, Dir: stateDir, Bound: cfg.Staging.BusyWait.D(), Log: log,
			BootID: func() (string, error) { return readBootID(root) }},
		Make: func(ctx context.Context) (*stage.Stager, error) {
			// The bus connection lives as long as ctx: the stager outlives
			// the call that first needs it (the bounded recover at start).
			conn, err := systemd.Dial(context.WithoutCancel(ctx))
			if err != nil {
				return nil, err
			}
			s, err := stage.New(o, stage.Deps{Systemd: conn, Runner: runner, Daemon: adapters.DaemonIdle{Client: client}})
			if err != nil {
				conn.Close()
				return nil, configError{err}
			}
			return s, nil
		},
	}, keeper
}

// guardMetricsTLS is the TLS of guard.metrics_url (the guard's scrapes and
// doctor's check); nil without TLS files.
func guardMetricsTLS(cfg *config.Config, root string) (*tls.Config, error) {
	g := cfg.Guard
	c, err := guard.MetricsTLS(rooted(root, g.MetricsCAFile), rooted(root, g.MetricsCertFile), rooted(root, g.MetricsKeyFile))
	if err != nil {
		return nil, fmt.Errorf("guard.metrics_*_file: %w", err)
	}
	return c, nil
}

// doctorMetrics is doctor's client for guard.metrics_url, with its TLS.
func doctorMetrics(cfg *config.Config, root string) (doctor.HTTPMetrics, error) {
	c, err := guardMetricsTLS(cfg, root)
	if err != nil || c == nil {
		return doctor.HTTPMetrics{}, err
	}
	return doctor.HTTPMetrics{Client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}}, nil
}

// etcdProcessCgroup finds etcd.local_process's cgroup in /proc (nil where
// it is not set): a static pod's changes with every restart.
func etcdProcessCgroup(cfg *config.Config, root string) func() (string, error) {
	if cfg.Etcd.LocalProcess == "" {
		return nil
	}
	proc := rooted(root, "/proc")
	return func() (string, error) { return etcdmember.ProcessCgroup(proc, cfg.Etcd.LocalProcess) }
}

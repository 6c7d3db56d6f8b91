package main

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iocost"
)

// The configuration reaches the engine's policy, the hooks, the windows and
// the stager's options as written; wiring talks to nothing yet.
func TestWireMapsConfig(t *testing.T) {
	cfg := config.Default()
	cfg.Agent.NodeName = "n1"
	cfg.Agent.CheckInterval = config.Duration(7 * time.Minute)
	cfg.Updates.MaxAttempts = 5
	cfg.Updates.Enabled = false
	cfg.Leader.MoveLeader = false
	cfg.Reboot.Strategy = config.StrategyPeriodic
	cfg.Reboot.Windows = []config.WindowSpec{{Days: []string{"Sat"}, Start: "02:00", Length: config.Duration(2 * time.Hour)}}
	cfg.Reboot.Hooks = []config.Hook{{Argv: []string{"/usr/local/bin/drain", "--force"}, Timeout: config.Duration(time.Minute)}}
	cfg.Etcd.LocalUnit = "etcd.service"
	cfg.Guard.FsyncP99Threshold = config.Duration(40 * time.Millisecond)
	cfg.Guard.LatencyFactor = 2
	cfg.Guard.MetricsInterval = config.Duration(2 * time.Second)
	cfg.Guard.RateProbeInterval = config.Duration(7 * time.Second)
	cfg.Guard.LearnPeriod = config.Duration(12 * time.Second)

	root := t.TempDir()
	a, err := wire(cfg, root, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	p := a.policy()
	if p.CheckInterval != 7*time.Minute || p.MaxFailures != 5 || !p.Disabled || p.MoveLeader || !p.RequireSafe || p.RecheckStaged {
		t.Errorf("policy %+v", p)
	}
	sat := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC) // a Saturday, 03:00 UTC
	if !p.Window.Contains(sat) || p.Window.Contains(sat.Add(2*time.Hour)) {
		t.Error("the configured window is not the engine's")
	}
	if a.node != "n1" || a.stateDir != root+"/var/lib/update-agent" || a.lock == nil || a.etcd == nil {
		t.Errorf("node %q state dir %q lock %v", a.node, a.stateDir, a.lock != nil)
	}

	o := stageOptions(cfg, root, a.stateDir, a.os.Client, a.log)
	if o.Guard.PressureUnit != "etcd.service" || o.Guard.PressureFile != "" {
		t.Errorf("PSI source: unit %q file %q", o.Guard.PressureUnit, o.Guard.PressureFile)
	}
	if o.SysRoot != root+"/sys" {
		t.Errorf("sysfs at %q under --root %s, want its /sys", o.SysRoot, root)
	}
	if b := o.Guard.Options.Baseline[guard.MetricWALFsync]; b.P99 != 20*time.Millisecond {
		t.Errorf("WAL baseline %+v, want p99 20ms (threshold 40ms / factor 2)", b)
	}
	if *o.Policy.Nice != cfg.Staging.Nice || o.Policy.IOWeight != uint64(cfg.Staging.IOWeight) || o.Policy.CPUWeight != "idle" {
		t.Errorf("policy %+v", o.Policy)
	}
	if len(o.OKExitStatuses) != 1 || o.OKExitStatuses[0] != 77 {
		t.Errorf("OK exit statuses %v", o.OKExitStatuses)
	}
	if o.Guard.MetricsEvery != 2*time.Second {
		t.Errorf("metrics scraped every %v, want the configured 2s", o.Guard.MetricsEvery)
	}
	if o.WriteRate.ProbeEvery != 7*time.Second {
		t.Errorf("write rate probed every %v, want the configured 7s", o.WriteRate.ProbeEvery)
	}
	if o.Guard.Options.LearnFor != 12*time.Second {
		t.Errorf("baseline learned for %v, want the configured 12s", o.Guard.Options.LearnFor)
	}
	// A configured fsync threshold is the operator's word: the rate loop's
	// brake factor does not move it; with the threshold learned it applies.
	if !o.WriteRateAuto || o.RateLoopFreezeFactor != 0 {
		t.Errorf("auto %v, rate-loop freeze factor %v with a configured threshold, want auto and 0", o.WriteRateAuto, o.RateLoopFreezeFactor)
	}
	if rc := o.WriteRate; rc.Start != 4_000_000 || rc.Min != 0 || rc.MinShare >= 0 || rc.IOSize >= 0 {
		t.Errorf("write rate config %+v, want start 4M as the floor (the measured default), no share, no IOPS cap", rc)
	}
	if rc := rateConfig(config.Guard{LatencyTarget: 1.3, RateStart: 4_000_000, RateMinShare: 0.25, RateIOSizeKiB: 16}); rc.MinShare != 0.25 || rc.IOSize != 16<<10 {
		t.Errorf("configured share and IO size %+v, want a quarter of the disk's and 16 KiB IOs", rc)
	}
	if rc := rateConfig(config.Guard{LatencyTarget: 1.3, RateStart: 4_000_000}); rc.MinShare >= 0 || rc.IOSize >= 0 {
		t.Errorf("zero share and IO size %+v, want the loop's off (negative)", rc)
	}
	if ic := o.IOCost; ic.Mode != iocost.Auto || ic.IOWeight != 1 || ic.EtcdIOWeight != 0 || ic.Targets.Promise != 1.3 ||
		ic.Targets.Default != 20*time.Millisecond || ic.Targets.Percentile != 99 || ic.Targets.VrateMin != 5 || ic.Targets.VrateMax != 1000 {
		t.Errorf("iocost options %+v, want auto by default (by the journal), with the default weights and targets", ic)
	}
	if !o.Guard.IOCostBrake {
		t.Errorf("guard.iocost_brake off by default, want on: a model overstating the disk is caught by etcd's latency")
	}
	if !o.MemoryHighAuto || o.Policy.MemoryHigh != 0 {
		t.Errorf("memory_high %d (auto %v), want auto by default: each window chooses", o.Policy.MemoryHigh, o.MemoryHighAuto)
	}
	cfg.Staging.MemoryHigh = 64 << 20
	if o := stageOptions(cfg, root, a.stateDir, a.os.Client, a.log); o.MemoryHighAuto || o.Policy.MemoryHigh != 64<<20 {
		t.Errorf("memory_high = \"64M\": %d (auto %v), want 64M in every window", o.Policy.MemoryHigh, o.MemoryHighAuto)
	}
	cfg.Staging.IOCost = config.IOCostOn
	if ic := iocostOptions(cfg); ic.Mode != iocost.On {
		t.Error("staging.iocost = true does not reach the stager as every disk")
	}
	cfg.Staging.IOCost = config.IOCostWithModel
	if ic := iocostOptions(cfg); ic.Mode != iocost.WithModel {
		t.Error(`staging.iocost = "with-model" does not reach the stager`)
	}
	cfg.Staging.IOCost = config.IOCostOff
	if iocostOptions(cfg).Mode != iocost.Off {
		t.Error("staging.iocost = false does not reach the stager")
	}
	cfg.Staging.IOCostModels = []string{"vda rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500"}
	if m := iocostOptions(cfg).Models["vda"]; !m.User || m.WRandIOPS != 500 {
		t.Errorf("vda's configured model %+v", m)
	}
	cfg.Guard.FsyncP99Threshold = 0
	if o := stageOptions(cfg, root, a.stateDir, a.os.Client, a.log); o.RateLoopFreezeFactor != 4 {
		t.Errorf("rate-loop freeze factor %v with the threshold learned, want the default 4", o.RateLoopFreezeFactor)
	}
}

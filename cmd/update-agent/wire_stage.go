package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/metrics"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/systemd"
)

// rpmOstreeDaemon is the unit that does the writing for the rpm-ostree CLI.
const rpmOstreeDaemon = "rpm-ostreed.service"

// stagingView is the last staging, for status.
type stagingView struct {
	mu   sync.Mutex
	last *stagingReport
	// baseline is the rolling latency baseline the daemon keeps while no
	// staging runs (nil without the guard).
	baseline *guard.Keeper
}

type stagingReport struct {
	At          time.Time `json:"at"`
	Seconds     float64   `json:"seconds"`
	OK          bool      `json:"ok"`
	Error       string    `json:"error,omitempty"`
	Disks       []string  `json:"disks,omitempty"`
	Guarded     bool      `json:"guarded"`
	Freezes     int       `json:"freezes"`
	ForcedThaws int       `json:"forced_thaws"`
	Frozen      float64   `json:"frozen_seconds"`
	Baseline    string    `json:"baseline,omitempty"`
	Setup       float64   `json:"setup_seconds"`
	WriteRate   uint64    `json:"write_rate,omitempty"`
	RateCuts    int       `json:"write_rate_cuts,omitempty"`
}

func (v *stagingView) get() *stagingReport {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
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
			MemoryHigh:           uint64(s.MemoryHigh),
		},
		WriteBandwidthMax: uint64(s.IOWriteBandwidthMax),
		WriteRateAuto:     s.IOWriteBandwidthMax == config.BandwidthAuto,
		WriteRate:         guard.RateConfig{Target: g.LatencyTarget},
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
		o.SysRoot = root
	}
	o.Guard = stage.GuardOptions{
		Enabled:    g.Enabled,
		MetricsURL: g.MetricsURL,
		Options: guard.Options{
			Config: guard.Config{
				FreezeFactor:   g.LatencyFactor,
				ThawFactor:     g.ThawFactor,
				MinFreeze:      g.MinFreeze.D(),
				MaxFreeze:      g.MaxFreeze.D(),
				MinRunShare:    g.MinRunShare,
				MaxTotalFrozen: g.MaxTotalPause.D(),
			},
			Interval: g.Interval.D(),
			Window:   g.Window.D(),
			Log:      log,
		},
	}
	if o.WriteRateAuto {
		o.WriteBandwidthMax = 0
	}
	if g.Enabled {
		o.BaselineMaxAge = g.BaselineMaxAge.D()
		k := &guard.Keeper{
			Src:  &baselineInputs{in: guard.Inputs{MetricsURL: g.MetricsURL}, unit: cfg.Etcd.LocalUnit, root: root},
			File: filepath.Join(stateDir, "latency-baseline.json"),
			Log:  log,
		}
		if err := k.Load(); err != nil {
			log.Warn("latency baseline: starting afresh", "err", err)
		}
		o.Baseline = k
	}
	if g.IOPressureThreshold > 0 {
		// etcd's own cgroup when known: the stager's stalls do not count there.
		if cfg.Etcd.LocalUnit != "" {
			o.Guard.PressureUnit = cfg.Etcd.LocalUnit
		} else {
			o.Guard.PressureFile = rooted(root, "/proc/pressure/io")
		}
		o.Guard.Options.Config.StallFreeze = g.IOPressureThreshold / 100
		o.Guard.Options.Config.StallThaw = g.IOPressureThreshold / 200
	}
	if t := g.FsyncP99Threshold.D(); t > 0 && g.LatencyFactor > 0 {
		// The guard freezes above LatencyFactor x baseline p99: a
		// configured threshold sets that p99; the median (thaw level) is
		// still learned.
		p99 := time.Duration(float64(t) / g.LatencyFactor)
		o.Guard.Options.Baseline = guard.Baseline{guard.MetricWALFsync: {P99: p99}}
	}
	return o
}

// newStager builds the gentle stager; it dials systemd on first use.
func newStager(cfg *config.Config, root, stateDir string, client *rpmostree.Client, m *metrics.Metrics, view *stagingView, log *slog.Logger) *adapters.Stager {
	o := stageOptions(cfg, root, stateDir, client, log)
	if k, ok := o.Baseline.(*guard.Keeper); ok {
		view.baseline = k
	}
	runner := oplog.Runner{Log: log}
	image := ""
	if cfg.Updates.Source == config.SourceImage {
		image = cfg.Updates.Image
	}
	return &adapters.Stager{
		Client:         client,
		Image:          image,
		AllowDowngrade: cfg.Updates.AllowDowngrade,
		Make: func(ctx context.Context) (*stage.Stager, error) {
			// The bus connection lives as long as ctx: the stager outlives
			// the call that first needs it (the bounded recover at start).
			conn, err := systemd.Dial(context.WithoutCancel(ctx))
			if err != nil {
				return nil, err
			}
			return stage.New(o, stage.Deps{Systemd: conn, Runner: runner, Daemon: daemonIdle{client}})
		},
		Done: func(rep stage.Report, err error) {
			m.GuardDecisions("freeze", rep.Guard.Freezes)
			m.GuardDecisions("forced_thaw", rep.Guard.ForcedThaws)
			m.Frozen(rep.Guard.Frozen)
			r := &stagingReport{At: time.Now(), Seconds: rep.Duration.Seconds(), OK: err == nil, Disks: rep.Disks,
				Guarded: rep.Guarded, Freezes: rep.Guard.Freezes, ForcedThaws: rep.Guard.ForcedThaws, Frozen: rep.Guard.Frozen.Seconds(),
				Baseline: rep.Baseline, Setup: rep.Setup.Seconds(), WriteRate: rep.Guard.Rate, RateCuts: rep.Guard.RateCuts}
			if err != nil {
				r.Error = err.Error()
			}
			view.mu.Lock()
			view.last = r
			view.mu.Unlock()
		},
	}
}

// daemonIdle tells agent/stage whether rpm-ostreed runs a transaction (it
// is restarted to take the policy only when idle).
type daemonIdle struct{ c *rpmostree.Client }

func (d daemonIdle) Idle(ctx context.Context) (bool, error) {
	st, err := d.c.Status(ctx)
	if err != nil {
		return false, err
	}
	return st.Transaction == nil, nil
}

// baselineInputs reads etcd's metrics and, once the unit's cgroup is
// known, its io.pressure for the rolling baseline. The cgroup is looked up
// lazily: etcd may start after the agent.
type baselineInputs struct {
	in   guard.Inputs
	unit string
	root string
}

func (b *baselineInputs) Read(ctx context.Context) (guard.Reading, error) {
	if b.unit != "" && b.in.PressureFile == "" {
		if conn, err := systemd.Dial(ctx); err == nil {
			st, err := conn.Status(ctx, b.unit)
			conn.Close()
			if err == nil && st.ControlGroup != "" {
				b.in.PressureFile = filepath.Join(rooted(b.root, "/sys/fs/cgroup"), st.ControlGroup, "io.pressure")
			}
		}
	}
	return b.in.Read(ctx)
}

package main

import (
	"context"
	"log/slog"
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
				Guarded: rep.Guarded, Freezes: rep.Guard.Freezes, ForcedThaws: rep.Guard.ForcedThaws, Frozen: rep.Guard.Frozen.Seconds()}
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

// Package stage runs one gentle staging: the I/O scheduler and queue for the
// window, the policy on rpm-ostreed (which does the writing), per-object
// fsync, a transient unit running the staging command under the policy, the
// latency guard pacing it, and the undoing of all of it on success, failure
// and abort, or on the next start after a crash (Recover).
package stage

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iosched"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/agent/systemd"
)

// Systemd is the part of agent/systemd a staging needs (*systemd.Conn).
type Systemd interface {
	StartTransient(ctx context.Context, t systemd.TransientService) error
	Wait(ctx context.Context, unit string) (systemd.UnitStatus, error)
	Status(ctx context.Context, unit string) (systemd.UnitStatus, error)
	// Brief and ControlGroup are the cheap reads for polling.
	Brief(ctx context.Context, unit string) (systemd.Brief, error)
	ControlGroup(ctx context.Context, unit string) (string, error)
	Stop(ctx context.Context, unit string) error
	Restart(ctx context.Context, unit string) error
	ResetFailed(ctx context.Context, unit string) error
	Reload(ctx context.Context) error
	Save(ctx context.Context, unit string, names ...string) ([]systemd.SavedProp, error)
	SetRuntime(ctx context.Context, unit string, props ...sd.Property) error
	Freeze(ctx context.Context, unit string) error
	Thaw(ctx context.Context, unit string) error
}

// Scheduler changes the disks' queues for the window (agent/iosched).
type Scheduler interface {
	Disks(paths []string) ([]string, error)
	Filesystems(paths []string) ([]iosched.Filesystem, error)
	Apply(ctx context.Context, disks []string) error
	Restore() error
}

// Daemon answers whether rpm-ostreed may be restarted: only when it runs no
// transaction (the caller knows how to ask rpm-ostree).
type Daemon interface {
	Idle(ctx context.Context) (bool, error)
}

// Runner runs external commands (oplog.Runner).
type Runner interface {
	Run(ctx context.Context, desc string, argv ...string) (oplog.Result, error)
}

// Options say how to stage. The engine maps the configuration onto them.
type Options struct {
	// StagingUnit is the transient unit's name (one staging at a time).
	StagingUnit string
	// DaemonUnit does the writing for the rpm-ostree CLI; it gets the
	// policy as a runtime drop-in. "" skips it.
	DaemonUnit string
	// Policy applies to the staging unit and DaemonUnit.
	Policy systemd.Policy
	// MemoryHighAuto: each window chooses Policy.MemoryHigh (the page
	// cache allowance) from its pacing (iocost.MemoryAllowance).
	MemoryHighAuto bool
	// WriteBandwidthMax (bytes/s) caps writes on each staging disk; 0: none.
	// WriteRateAuto instead paces the cap in a closed loop (the guard's
	// rate controller, tuned by WriteRate) from etcd's latency; without a
	// guard it stays at WriteRate's start rate.
	WriteBandwidthMax uint64
	WriteRateAuto     bool
	WriteRate         guard.RateConfig
	// RateLoopFreezeFactor is the guard's freeze factor while the rate
	// loop paces (guard.RateOptions.FreezeFactor; 0: the guard's own).
	RateLoopFreezeFactor float64
	// RestartIdleDaemon restarts DaemonUnit when it runs no transaction,
	// so the process half of the policy (I/O class, nice) applies at once.
	// Off by default: the cgroup half is set live instead, without a stall.
	RestartIdleDaemon bool

	// Paths are resolved to the disks whose queues change.
	Paths []string
	// Scheduler ("bfq"), NrRequests and MaxSectorsKB for the window;
	// KeepScheduler leaves them after it.
	Scheduler     string
	KeepScheduler bool
	NrRequests    int
	MaxSectorsKB  int
	SysRoot       string
	ModprobeArgv  []string

	// PerObjectFsync sets core.per-object-fsync=true in Repo's config for
	// the window, so writeback is steady instead of one big flush.
	PerObjectFsync bool
	Repo           string
	OstreeArgv     []string

	// EtcdUnit gets IODeviceLatencyTargetUSec=EtcdLatencyTarget on the
	// staging disks for the window (0: not set).
	EtcdUnit          string
	EtcdLatencyTarget time.Duration

	// IOCost turns the kernel's proportional I/O controller on for the
	// window; where it is on, the "auto" write rate loop is not used.
	IOCost IOCostOptions

	// Environment is set on the staging unit (rpmostree.Client.StageEnv).
	Environment []string
	// OKExitStatuses are exit statuses of the staging command that are not
	// failures (rpm-ostree's 77: nothing new to stage). Report.Unit has
	// the status for the caller to interpret.
	OKExitStatuses []int

	// Timeout bounds the whole staging (0: none); the guard's deadline
	// defaults to three quarters of it.
	Timeout time.Duration
	Guard   GuardOptions

	// Baseline is the rolling baseline kept while no staging runs
	// (guard.Keeper); nil or older than BaselineMaxAge (default 15m): the
	// guard learns for LearnFor before anything is changed.
	Baseline       BaselineSource
	BaselineMaxAge time.Duration

	// StateDir keeps the undo journal and the scheduler state.
	StateDir string
	// BootIDPath is where the current boot's ID is read; "" is the
	// kernel's. Records of runtime state are tied to it.
	BootIDPath string
	// RuntimeUnitDir and RuntimeControlDir default to systemd's.
	RuntimeUnitDir    string
	RuntimeControlDir string
	Log               *slog.Logger
}

// GuardOptions configure the latency guard for the window.
type GuardOptions struct {
	Enabled bool
	// MetricsURL is etcd's /metrics; "" paces on kernel signals alone.
	MetricsURL string
	// MetricsTLS is for an https:// MetricsURL (guard.MetricsTLS).
	MetricsTLS *tls.Config
	// PressureFile is the PSI file to watch ("" none; e.g.
	// /proc/pressure/io). PressureUnit, when PressureFile is "", names a
	// unit (etcd's) whose cgroup io.pressure is watched: the stager's own
	// stalls do not count there.
	PressureFile string
	PressureUnit string
	// PressureCgroup, when both are "", finds etcd's cgroup (relative to
	// the cgroup2 root) at the window's start: a member no unit runs
	// (etcd.local_process) changes cgroup with every restart.
	PressureCgroup func() (string, error)
	// MetricsEvery spaces the scrapes of MetricsURL (at least Interval;
	// 0: a second).
	MetricsEvery time.Duration
	// IOCostBrake: under iocost, etcd over the brake's limit scales the
	// window's models down (guard.StepModel; guard.iocost_brake).
	IOCostBrake bool
	guard.Options
	// Source replaces the real inputs (tests).
	Source guard.Source
}

// BaselineSource is the rolling baseline (*guard.Keeper).
type BaselineSource interface {
	Record() guard.Rolling
	Pause() (resume func())
}

// Deps are the edges.
type Deps struct {
	Systemd   Systemd
	Runner    Runner
	Daemon    Daemon    // nil: never restart the daemon
	Scheduler Scheduler // nil: agent/iosched with the options
	IOCost    IOCost    // nil: agent/iocost in the root cgroup
	// Now is the clock the window is timed by for learning (nil:
	// time.Now).
	Now func() time.Time
}

// Stager runs stagings.
type Stager struct {
	o      Options
	d      Deps
	sched  Scheduler
	iocost IOCost
	log    *slog.Logger
	held   *os.File // the staging lock while Run or Recover holds it
}

// DefaultStagingUnit is the staging unit's name unless Options names one
// (doctor names it too).
const DefaultStagingUnit = "update-agent-staging.service"

// DropInName is the drop-in the stager writes for DaemonUnit.
const DropInName = "50-update-agent-staging.conf"

// New checks the options and returns a Stager.
func New(o Options, d Deps) (*Stager, error) {
	if o.StagingUnit == "" {
		o.StagingUnit = DefaultStagingUnit
	}
	if o.RuntimeUnitDir == "" {
		o.RuntimeUnitDir = systemd.RuntimeUnitDir
	}
	if o.RuntimeControlDir == "" {
		o.RuntimeControlDir = systemd.RuntimeControlDir
	}
	if o.Repo == "" {
		o.Repo = "/ostree/repo"
	}
	if len(o.OstreeArgv) == 0 {
		o.OstreeArgv = []string{"ostree"}
	}
	if len(o.ModprobeArgv) == 0 {
		o.ModprobeArgv = []string{"modprobe"} // bfq is a module on most kernels
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.BootIDPath == "" {
		o.BootIDPath = state.BootIDPath
	}
	if o.BaselineMaxAge == 0 {
		o.BaselineMaxAge = 15 * time.Minute
	}
	if err := o.WriteRate.Validate(); err != nil {
		return nil, fmt.Errorf("staging write rate: %w", err)
	}
	if o.StateDir == "" {
		return nil, errors.New("staging: no state directory")
	}
	if d.Systemd == nil || d.Runner == nil {
		return nil, errors.New("staging: systemd and a command runner are required")
	}
	if err := o.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("staging policy: %w", err)
	}
	if o.Guard.Enabled {
		if err := o.Guard.Config.Validate(); err != nil {
			return nil, fmt.Errorf("latency guard: %w", err)
		}
	}
	s := &Stager{o: o, d: d, sched: d.Scheduler, iocost: d.IOCost, log: o.Log}
	if s.iocost == nil {
		s.iocost = o.iocostController()
	}
	if s.sched == nil {
		res := iosched.Resolver{SysRoot: o.SysRoot}
		s.sched = IOSched{
			Resolver: res,
			Options: iosched.Options{SysRoot: o.SysRoot, Scheduler: o.Scheduler, NrRequests: o.NrRequests,
				MaxSectorsKB: o.MaxSectorsKB, Keep: o.KeepScheduler, StateFile: filepath.Join(o.StateDir, "iosched.json"),
				ModprobeArgv: o.ModprobeArgv, Runner: d.Runner, Log: o.Log, BootIDPath: o.BootIDPath,
				Disks: func() ([]string, error) { return res.Disks(o.Paths) }},
		}
	}
	return s, nil
}

// Report is how a staging went.
type Report struct {
	Unit    systemd.UnitStatus
	Disks   []string
	Guard   guard.Stats
	Guarded bool
	// IOCost: the window ran under the kernel's iocost.
	IOCost bool
	// Pacing says in a line how the window paced staging (pacingSummary).
	Pacing string
	// MemoryHigh is the page cache the window allowed the stager and the
	// daemon (0: none).
	MemoryHigh uint64
	// Baseline says where the guard's baseline came from.
	Baseline string
	// Setup is how long opening the window took (scheduler, policies,
	// fsync setting), Duration the whole run.
	Setup    time.Duration
	Duration time.Duration
}

// Run stages by running argv (rpmostree.Client.StageArgv) in the transient
// unit, and undoes every change before returning, whatever happened.
func (s *Stager) Run(ctx context.Context, argv []string) (rep Report, err error) {
	start := time.Now()
	if len(argv) == 0 {
		return rep, errors.New("staging: empty command")
	}
	unlock, err := s.lock()
	if err != nil {
		return rep, fmt.Errorf("staging: %w", err)
	}
	defer unlock()
	// What an earlier, interrupted run left would otherwise be taken for
	// the original settings.
	if err := s.recover(ctx); err != nil {
		return rep, fmt.Errorf("staging: undoing an earlier staging first: %w", err)
	}
	j := &journal{BootID: s.bootID()}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if uerr := s.undo(uctx, j); uerr != nil {
			s.log.Error("undoing the staging policy failed; the next start retries", "err", uerr)
			err = errors.Join(err, uerr)
		}
		rep.Duration = time.Since(start)
		s.log.Info("staging window closed", "staging_unit", s.o.StagingUnit, "duration", rep.Duration.Round(time.Millisecond),
			"guard_freezes", rep.Guard.Freezes, "guard_frozen_seconds", rep.Guard.Frozen.Seconds(),
			"guard_forced_thaws", rep.Guard.ForcedThaws, "setup_seconds", round3(rep.Setup.Seconds()),
			"write_rate_mbps", round3(float64(rep.Guard.Rate)/1e6), "write_rate_cuts", rep.Guard.RateCuts,
			"baseline", rep.Baseline, "iocost", rep.IOCost, "ok", err == nil)
	}()
	if s.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.o.Timeout, fmt.Errorf("staging took longer than %s", s.o.Timeout))
		defer cancel()
	}

	w, err := s.open(ctx, j, &rep, false)
	defer w.close()
	if err != nil {
		return rep, fmt.Errorf("staging: %w", err)
	}

	j.StagingUnit = s.o.StagingUnit
	if err := s.saveJournal(j); err != nil {
		return rep, err
	}
	ts := systemd.TransientService{
		Name:        s.o.StagingUnit,
		Description: "update-agent: stage an OS update (" + strings.Join(argv, " ") + ")",
		Argv:        argv,
		Policy:      w.policy,
		KillSignal:  2, // SIGINT: the rpm-ostree CLI then cancels its transaction
		Environment: s.o.Environment,
	}
	s.log.Info("staging started", "staging_unit", ts.Name, "argv", argv, "disks", rep.Disks, "guard", w.g != nil)
	if err := s.d.Systemd.StartTransient(ctx, ts); err != nil {
		return rep, fmt.Errorf("staging: %w", err)
	}
	stopPacing := s.pace(ctx, j, w, &rep, ts.Name)
	st, werr := s.d.Systemd.Wait(ctx, ts.Name)
	stopPacing("staging unit ended")
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if werr != nil {
		// Cancelled or timed out: stop the unit (SIGINT cancels the
		// transaction) before undoing the policy under it.
		s.log.Warn("stopping the staging unit", "staging_unit", ts.Name, "reason", werr)
		if err := s.d.Systemd.Stop(uctx, ts.Name); err != nil {
			s.log.Warn("stopping the staging unit", "staging_unit", ts.Name, "err", err)
		}
		rep.Unit, _ = s.d.Systemd.Status(uctx, ts.Name)
		s.release(uctx, rep.Unit)
		return rep, fmt.Errorf("staging: %w", werr)
	}
	rep.Unit = st
	s.release(uctx, st)
	if st.Result == "exit-code" && st.ExecMainCode == 1 && slices.Contains(s.o.OKExitStatuses, int(st.ExecMainStatus)) {
		return rep, nil
	}
	if err := st.Err(); err != nil {
		return rep, fmt.Errorf("staging: %w (see journalctl -u %s)", err, ts.Name)
	}
	return rep, nil
}

func (s *Stager) now() time.Time {
	if s.d.Now != nil {
		return s.d.Now()
	}
	return time.Now()
}

// release lets systemd drop the finished transient unit.
func (s *Stager) release(ctx context.Context, st systemd.UnitStatus) {
	switch {
	case st.ActiveState == "failed":
		_ = s.d.Systemd.ResetFailed(ctx, st.Name)
	case st.ActiveState == "active":
		_ = s.d.Systemd.Stop(ctx, st.Name)
	}
}

// Package config holds update-agent's whole configuration: its types, its
// defaults (Default, the one place they live), loading of layered TOML
// fragments from config.d directories, and validation that names the file
// and key path of every problem.
package config

import "time"

// Config is the merged configuration. Its toml tags are the key names; the
// reference in docs/configuration.md and packaging/config.d/00-defaults.toml
// are checked against them by tests.
type Config struct {
	Agent   Agent   `toml:"agent"`
	Updates Updates `toml:"updates"`
	Staging Staging `toml:"staging"`
	Guard   Guard   `toml:"guard"`
	Lock    Lock    `toml:"lock"`
	Etcd    Etcd    `toml:"etcd"`
	Leader  Leader  `toml:"leader"`
	Reboot  Reboot  `toml:"reboot"`
	Gates   Gates   `toml:"gates"`
	Metrics Metrics `toml:"metrics"`
	// FleetLock serves zincati's FleetLock protocol (fleetlock.go).
	FleetLock FleetLock `toml:"fleetlock"`
	// Cincinnati and Identity: the update graph (updates.source = "graph",
	// graph.go), in zincati's words.
	Cincinnati Cincinnati `toml:"cincinnati"`
	Identity   Identity   `toml:"identity"`

	// src records where each value came from when the Config was loaded,
	// so that Validate can name the file of a bad value.
	src *Sources
}

// Agent is the daemon's own behaviour.
type Agent struct {
	// CheckInterval is the time between two checks for an update.
	CheckInterval Duration `toml:"check_interval"`
	// CheckJitter is added at random to each interval so that a fleet does
	// not ask its update server at the same second.
	CheckJitter Duration `toml:"check_jitter"`
	// StateDir holds the persisted state (lease ID, staged target, changed
	// schedulers) that must survive a restart or reboot.
	StateDir string `toml:"state_dir"`
	// NodeName names this node in the lock and in status; "auto" is the
	// host name.
	NodeName string `toml:"node_name"`
	// RPMOstree is the rpm-ostree binary (configurable so tests and the
	// demo can point at the stand-in).
	RPMOstree string `toml:"rpm_ostree"`
	// Bootc is the bootc binary (updates.backend "bootc", or "auto" on an
	// image-mode host).
	Bootc string `toml:"bootc"`
	// Ostree is the ostree binary: `ostree admin status` tells whether the
	// staged deployment is still locked for finalization.
	Ostree string `toml:"ostree"`
}

// Staging is the I/O and CPU policy of the staging window (issue 8).
type Staging struct {
	// IOSchedulingClass: idle, best-effort, realtime or none.
	IOSchedulingClass    string    `toml:"io_scheduling_class"`
	IOSchedulingPriority int       `toml:"io_scheduling_priority"`
	IOWeight             int       `toml:"io_weight"`
	CPUWeight            CPUWeight `toml:"cpu_weight"`
	Nice                 int       `toml:"nice"`
	// MemoryHigh is the page cache allowed to the stager and rpm-ostreed:
	// their MemoryHigh= is their own memory plus this, so dirty data is
	// written back in small pieces rather than one long flush. The
	// default, MemorySizeAuto, is 8M in a window iocost paces on a journal
	// that orders data, 32M elsewhere (iocost.MemoryAllowance).
	MemoryHigh MemorySize `toml:"memory_high"`
	// IOWriteBandwidthMax caps writes per disk; zero means no cap,
	// BandwidthAuto ("auto") a cap paced in a closed loop from etcd's
	// latency (the guard's rate controller). A fixed cap is right for one
	// disk only: measured, 5M held a 20 MB/s disk and made staging 5x
	// slower than needed on a 125 MB/s one.
	IOWriteBandwidthMax Bandwidth `toml:"io_write_bandwidth_max"`
	// Scheduler is selected on the disks behind Paths for the window; ""
	// (the default) leaves the scheduler alone. The idle class and the
	// weights mean nothing without bfq, but the write cap paces staging
	// without them, and the switch itself stalled etcd: measured
	// (sched-300MiB-1), etcd's p99 while the window opened was 7.3x a
	// quiet window with the switch to bfq and 2.0x without, and 1.98x
	// against 1.40x alone while staging.
	Scheduler        string `toml:"scheduler"`
	RestoreScheduler bool   `toml:"restore_scheduler"`
	// NRRequests sets a shallower queue/nr_requests for the window; 0
	// leaves it alone.
	NRRequests int `toml:"nr_requests"`
	// MaxSectorsKB caps one request's size (queue/max_sectors_kb) for the
	// window; 0 leaves it alone. With nr_requests it bounds how much of
	// the stager's writeback sits in the device queue ahead of an fsync.
	MaxSectorsKB int `toml:"max_sectors_kb"`
	// Paths are resolved to their whole disks (through partitions, dm, md).
	Paths          []string `toml:"paths"`
	PerObjectFsync bool     `toml:"per_object_fsync"`
	// EtcdIOLatencyTarget, when non-zero, sets IODeviceLatencyTargetSec on
	// etcd.local_unit for the window.
	EtcdIOLatencyTarget Duration `toml:"etcd_io_latency_target"`
	Timeout             Duration `toml:"timeout"`
	// BusyWait is how long a staging attempt waits for an rpm-ostree
	// transaction the agent did not start; still running, the attempt
	// ends as busy (not a failure) and is retried.
	BusyWait Duration `toml:"busy_wait"`
	// PaceForeign is companion mode: with updates.enabled = false, the
	// staging window is opened around every rpm-ostreed transaction that
	// writes a deployment, whoever started it (zincati, the MCO daemon, an
	// admin), and undone after it.
	PaceForeign bool `toml:"pace_foreign"`
	// IOCost turns on blk-iocost on the disks behind Paths for the
	// window (io.cost.qos, and io.cost.model where IOCostModels names the
	// disk, in the root cgroup), with IOWeight low on the stager and
	// rpm-ostreed and high on etcd's unit. "with-model" puts it only on
	// the disks IOCostModels gives a model for: with the disk's own limits
	// it held etcd's WAL fsync p99 at x1.26 alone on a small ext4 disk
	// where the rate loop sat at x3.96, x1.03 against x1.61 on a fast XFS
	// disk (make bench). Without a model the rate loop paces; true learns
	// the model of a disk without one (agent/iocost/learn.go). The
	// default, "auto", is true where the staging paths' journal orders
	// data and "with-model" elsewhere (iocost.Disks): learning with the
	// 8M bound held x1.80 on ext4's small disk against the defaults'
	// x17.4, but x4.07 on XFS against the rate loop's x2.38. A kernel
	// without iocost falls back to the rate loop too.
	IOCost IOCostMode `toml:"iocost"`
	// IOCostModels are operator-given cost models, one a disk: its kernel
	// name then the linear model's six parameters ("vda rbps=20000000
	// rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500
	// wrandiops=500"). A disk without one learns its own under iocost =
	// true, and under "auto" on a journal that orders data.
	IOCostModels []string `toml:"iocost_models"`
	// IOCostLatencyTarget is the device completion latency held at
	// IOCostPercentile; 0 derives it from etcd's WAL fsync p99 before the
	// window and guard.latency_target, IOCostDefaultLatencyTarget without
	// a baseline.
	IOCostLatencyTarget        Duration `toml:"iocost_latency_target"`
	IOCostDefaultLatencyTarget Duration `toml:"iocost_default_latency_target"`
	IOCostPercentile           float64  `toml:"iocost_percentile"`
	// IOCostVrateMin and IOCostVrateMax bound the kernel's scaling of the
	// model's rate (percent), whatever the model's source: the QoS decides
	// how far a wrong model goes. At 150 a given model understating the
	// disk 4x starved staging (the loads used the model's whole rate;
	// 11 MiB staged in 13 min, make bench on ext4's small disk).
	IOCostVrateMin float64 `toml:"iocost_vrate_min"`
	IOCostVrateMax float64 `toml:"iocost_vrate_max"`
	// IOCostIOWeight is the stager's and rpm-ostreed's IOWeight= while
	// iocost is on (instead of IOWeight); IOCostEtcdIOWeight is
	// etcd.local_unit's, "auto" by default: raised where the journal does
	// not order data, left alone where it does (iocost.EtcdWeight).
	IOCostIOWeight     int          `toml:"iocost_io_weight"`
	IOCostEtcdIOWeight EtcdIOWeight `toml:"iocost_etcd_io_weight"`
}

// Guard is the latency guard that paces staging from etcd's observed
// latency and the kernel's I/O pressure.
type Guard struct {
	Enabled bool `toml:"enabled"`
	// MetricsURL is the local etcd member's /metrics; "" uses the kernel
	// signals alone (hosts without etcd).
	MetricsURL string `toml:"metrics_url"`
	// MetricsCAFile, MetricsCertFile and MetricsKeyFile: TLS for an
	// https:// MetricsURL (a member serving /metrics with client-cert auth,
	// as kubeadm's static-pod etcd does); "" uses the system roots and no
	// client certificate.
	MetricsCAFile   string `toml:"metrics_ca_file"`
	MetricsCertFile string `toml:"metrics_cert_file"`
	MetricsKeyFile  string `toml:"metrics_key_file"`
	// MetricsInterval spaces the scrapes of MetricsURL while staging (at
	// least Interval): etcd renders its whole /metrics for each one.
	MetricsInterval Duration `toml:"metrics_interval"`
	// FsyncP99Threshold freezes staging above this WAL fsync p99; 0 learns
	// it as LatencyFactor times the p99 measured before staging starts.
	FsyncP99Threshold Duration `toml:"fsync_p99_threshold"`
	LatencyFactor     float64  `toml:"latency_factor"`
	// RateLoopLatencyFactor: while staging.io_write_bandwidth_max = "auto"
	// paces the write rate, freeze only above this multiple (when it is
	// above LatencyFactor): the brake is an emergency there. Not applied
	// with a configured FsyncP99Threshold, which stays the operator's word.
	RateLoopLatencyFactor float64 `toml:"rate_loop_latency_factor"`
	// ThawFactor thaws when the median is back within this times the
	// normal median (requiring every sample low starved the stager).
	ThawFactor float64 `toml:"thaw_factor"`
	// IOPressureThreshold is the share of time (percent) some task waited
	// on I/O (PSI io.pressure "some") over Window above which staging is
	// frozen.
	IOPressureThreshold float64  `toml:"io_pressure_threshold"`
	Interval            Duration `toml:"interval"`
	Window              Duration `toml:"window"`
	// MinFreeze and MaxFreeze bound a single freeze; MaxFreeze makes sure
	// the stager always makes progress.
	MinFreeze Duration `toml:"min_freeze"`
	MaxFreeze Duration `toml:"max_freeze"`
	// MinRunShare is the least share of time the stager runs between
	// freezes.
	MinRunShare float64 `toml:"min_run_share"`
	// MaxTotalPause is the total frozen time after which the guard stops
	// pacing and reports (escalates) instead of starving staging forever.
	MaxTotalPause Duration `toml:"max_total_pause"`
	// LatencyTarget: with staging.io_write_bandwidth_max = "auto" the
	// write rate is cut when etcd's p99 exceeds this times its baseline,
	// and probed up while below (freezing stays above LatencyFactor).
	LatencyTarget float64 `toml:"latency_target"`
	// RateProbeInterval spaces the rate loop's increases; at 5 s (the
	// loop's window) each raise is judged by what came after it. A raise
	// shows in etcd's latency only once the write-back it allows reaches
	// the disk, seconds later: probing every second raised 4 -> 6 MB/s
	// before the first evidence of the first step came in
	// (full-ostree-xfs-600MiB-4).
	RateProbeInterval Duration `toml:"rate_probe_interval"`
	// RateStart is the loop's first rate. Its floor can be relative to
	// the disk: RateMinShare of the highest write rate the staging disks
	// achieved in the window (0, the default: RateStart is the floor),
	// never below RateMin (0: none). A constant floor never paces a disk
	// that cannot take it; the relative one is opt-in until make bench
	// measures it (the measured defaults stay).
	RateStart    Bandwidth `toml:"rate_start"`
	RateMin      Bandwidth `toml:"rate_min"`
	RateMinShare float64   `toml:"rate_min_share"`
	// RateIOSizeKiB paces IOPS with the rate: the write IOPS cap (io.max
	// wiops) is the rate over this many KiB (0, the default: no IOPS
	// cap; unmeasured). ostree writes thousands of small files.
	RateIOSizeKiB int `toml:"rate_io_size_kib"`
	// BaselineMaxAge: the rolling baseline (one scrape a minute while no
	// staging runs) is used when younger than this; otherwise the guard
	// learns for LearnPeriod before the window opens.
	BaselineMaxAge Duration `toml:"baseline_max_age"`
	// LearnPeriod: with no fresh rolling baseline, how long the guard
	// watches etcd before changing anything (default 10s). 30 s learned no
	// better baseline on the small disk (WAL p99 15.7-28.1 ms against
	// 28.1-29.7 at 10 s, (a) 20.3-29.9) and added 25 s to each staging
	// (full-ostree-xfs-600MiB-5); on the fast disk etcd was over target at
	// the loop's floor either way.
	LearnPeriod Duration `toml:"learn_period"`
	// IOCostBrake: under iocost, etcd's latency over LatencyFactor x its
	// baseline p99 halves the window's cost models and brings the QoS's
	// vrate bound down to the kernel's vrate; 30 s within the limit
	// raises the models back: a model that overstates the disk is caught
	// by etcd's own latency (guard.StepModel; make bench on ext4's small
	// disk: x1.83 alone against x6.78 without it).
	IOCostBrake bool `toml:"iocost_brake"`
}

// Lock is the reboot semaphore in etcd.
type Lock struct {
	Enabled bool   `toml:"enabled"`
	Group   string `toml:"group"`
	Slots   int    `toml:"slots"`
	// KeyPrefix: holders live under <key_prefix>/<group>/.
	KeyPrefix string `toml:"key_prefix"`
	// RebootLeaseTTL is the reboot budget: the slot survives the holder's
	// reboot and expires if it never comes back within this time.
	RebootLeaseTTL Duration `toml:"reboot_lease_ttl"`
	// MinInterval spaces a group's reboots: the next holder waits until
	// this long after the previous one released (kept by an etcd lease, so
	// hosts' clocks do not matter). 0 = no spacing.
	MinInterval Duration `toml:"min_interval"`
}

// Etcd is how to reach the cluster (for the lock and member health).
type Etcd struct {
	Endpoints    []string `toml:"endpoints"`
	CAFile       string   `toml:"ca_file"`
	CertFile     string   `toml:"cert_file"`
	KeyFile      string   `toml:"key_file"`
	Username     string   `toml:"username"`
	PasswordFile string   `toml:"password_file"`
	DialTimeout  Duration `toml:"dial_timeout"`
	// Member is the local member's name; "auto" finds the member whose
	// client URLs match a local endpoint (none on workers).
	Member string `toml:"member"`
	// LocalUnit is the systemd unit running the local member, for its I/O
	// latency target and cgroup pressure; "" if none.
	LocalUnit string `toml:"local_unit"`
	// LocalProcess names the local member's process where no unit runs it
	// (the kubelet's static pod): its cgroup, for pressure, is found in
	// /proc each time; "" if none. Exclusive with LocalUnit.
	LocalProcess string `toml:"local_process"`
	// AllowQuorumLoss lets a member of a 1- or 2-member cluster reboot,
	// although etcd then has no quorum until it is back; without it such
	// a member is refused (leader.require_quorum).
	AllowQuorumLoss bool `toml:"allow_quorum_loss"`
}

// Leader is the leader-aware ordering of reboots.
type Leader struct {
	FollowersFirst bool `toml:"followers_first"`
	// FollowersGrace: a leader's node that staged an update and that no
	// other member is pending for waits up to this long after staging for
	// the members that announced none to find the update too (their checks
	// run on their own schedules); 0 = not at all.
	FollowersGrace Duration `toml:"followers_grace"`
	MoveLeader     bool     `toml:"move_leader"`
	RequireQuorum  bool     `toml:"require_quorum"`
}

// Reboot strategies.
const (
	StrategyImmediate = "immediate" // reboot as soon as the slot is taken
	StrategyPeriodic  = "periodic"  // only inside Windows
)

// Reboot says when and how to reboot.
type Reboot struct {
	Strategy string `toml:"strategy"`
	// TimeZone is an IANA name ("Europe/Berlin"), "UTC" or "Local"
	// ("localtime", zincati's word, means "Local").
	TimeZone string       `toml:"time_zone"`
	Windows  []WindowSpec `toml:"windows"`
	Hooks    []Hook       `toml:"hooks"`
	// NotifyUsers writes a line to /run/motd.d/ and a wall message before
	// the reboot.
	NotifyUsers bool `toml:"notify_users"`
	// LoggedInDelay is how long to wait for logged-in users to leave
	// before rebooting anyway, as zincati does; 0 = do not wait.
	LoggedInDelay Duration `toml:"logged_in_delay"`
}

// Gates hold a reboot while the cluster is in trouble (besides quorum and
// member health, always checked, and active etcd alarms, always checked
// when etcd is configured).
type Gates struct {
	// AlertmanagerURL is Alertmanager's base URL (API v2); "" = no alert
	// gate.
	AlertmanagerURL string `toml:"alertmanager_url"`
	// AlertRegexp selects the alert names that block; "" = every firing
	// alert blocks (silenced and inhibited alerts never do).
	AlertRegexp string `toml:"alert_regexp"`
	CAFile      string `toml:"ca_file"`
	CertFile    string `toml:"cert_file"`
	KeyFile     string `toml:"key_file"`
	// Timeout bounds one request to Alertmanager.
	Timeout Duration `toml:"timeout"`
	// Commands must all exit 0 for the node to go.
	Commands []Hook `toml:"commands"`
}

// WindowSpec is a maintenance window as written in TOML; see Window.
type WindowSpec struct {
	// Days are "Mon".."Sun" (or full names) on which the window starts.
	Days []string `toml:"days"`
	// Start is the local start time "HH:MM" in Reboot.TimeZone.
	Start string `toml:"start"`
	// Length is elapsed time from the start; it may cross midnight.
	Length Duration `toml:"length"`
	// StartTime and LengthMinutes are zincati's spelling of Start and
	// Length ([[updates.periodic.window]]), so a window copied from a
	// zincati fragment reads the same; set one spelling of each, not both.
	StartTime     string `toml:"start_time,omitempty"`
	LengthMinutes int    `toml:"length_minutes,omitempty"`
}

// StartClock is the window's "HH:MM" start in either spelling.
func (w WindowSpec) StartClock() string {
	if w.Start == "" {
		return w.StartTime
	}
	return w.Start
}

// Len is the window's length in either spelling.
func (w WindowSpec) Len() time.Duration {
	if w.Length == 0 {
		return time.Duration(w.LengthMinutes) * time.Minute
	}
	return w.Length.D()
}

// Hook is a pre-reboot command (drain, stop kubelet), run without a shell.
type Hook struct {
	Argv    []string `toml:"argv"`
	Timeout Duration `toml:"timeout"`
}

// Metrics is the Prometheus endpoint.
type Metrics struct {
	// Listen is "unix:/path" or "host:port"; "" disables metrics.
	Listen string `toml:"listen"`
}

// Default returns the built-in defaults: the single place they are written
// down (00-defaults.toml and docs/configuration.md are tested against it).
func Default() *Config {
	return &Config{
		Agent: Agent{
			CheckInterval: Duration(15 * time.Minute),
			CheckJitter:   Duration(5 * time.Minute),
			StateDir:      "/var/lib/update-agent",
			NodeName:      "auto",
			RPMOstree:     "/usr/bin/rpm-ostree",
			Bootc:         "/usr/bin/bootc",
			Ostree:        "/usr/bin/ostree",
		},
		Updates: Updates{
			Enabled:     true,
			Source:      SourceOrigin,
			MaxAttempts: 3,
			Backend:     BackendAuto,
		},
		Staging: Staging{
			IOSchedulingClass:    "idle",
			IOSchedulingPriority: 7,
			IOWeight:             10,
			CPUWeight:            CPUWeightIdle,
			Nice:                 10,
			MemoryHigh:           MemorySizeAuto,
			IOWriteBandwidthMax:  BandwidthAuto,
			Scheduler:            "",
			RestoreScheduler:     true,
			Paths:                []string{"/sysroot", "/var/lib/etcd"},
			Timeout:              Duration(2 * time.Hour),
			BusyWait:             Duration(5 * time.Minute),
			// The harness (500 IOPS / 20 MB/s, ext4 and XFS).
			IOCost:                     IOCostAuto,
			IOCostModels:               []string{},
			IOCostDefaultLatencyTarget: Duration(20 * time.Millisecond),
			IOCostPercentile:           99,
			IOCostVrateMin:             5,
			IOCostVrateMax:             1000,
			IOCostIOWeight:             1,
			IOCostEtcdIOWeight:         EtcdIOWeightAuto,
		},
		Guard: Guard{
			Enabled: true,
			// kubeadm's etcd serves plain-HTTP metrics here.
			MetricsURL: "http://127.0.0.1:2381/metrics",
			// Chosen from bench full-ostree-xfs-600MiB-4.
			MetricsInterval: Duration(3 * time.Second),
			LatencyFactor:   2,
			// Chosen from bench full-ostree-xfs-600MiB-3.
			RateLoopLatencyFactor: 4,
			ThawFactor:            1.5,
			IOPressureThreshold:   40,
			Interval:              Duration(250 * time.Millisecond),
			Window:                Duration(time.Second),
			MinFreeze:             Duration(200 * time.Millisecond),
			MaxFreeze:             Duration(2 * time.Second),
			MinRunShare:           0.2,
			MaxTotalPause:         Duration(30 * time.Minute),
			LatencyTarget:         1.3,
			RateProbeInterval:     Duration(5 * time.Second),
			RateStart:             4_000_000,
			RateMinShare:          0,
			RateIOSizeKiB:         0,
			BaselineMaxAge:        Duration(15 * time.Minute),
			LearnPeriod:           Duration(10 * time.Second),
			IOCostBrake:           true,
		},
		Lock: Lock{
			Enabled:        true,
			Group:          "default",
			Slots:          1,
			KeyPrefix:      "/update-agent/lock",
			RebootLeaseTTL: Duration(15 * time.Minute),
		},
		Etcd: Etcd{
			Endpoints:   []string{"http://127.0.0.1:2379"},
			DialTimeout: Duration(5 * time.Second),
			Member:      "auto",
		},
		Leader: Leader{
			FollowersFirst: true,
			// agent.check_interval + agent.check_jitter: a member checking
			// on its own schedule finds the update within that.
			FollowersGrace: Duration(20 * time.Minute),
			MoveLeader:     true,
			RequireQuorum:  true,
		},
		Reboot: Reboot{
			Strategy:    StrategyImmediate,
			TimeZone:    "UTC",
			Windows:     []WindowSpec{},
			Hooks:       []Hook{},
			NotifyUsers: true,
		},
		Gates: Gates{
			Timeout:  Duration(10 * time.Second),
			Commands: []Hook{},
		},
		Metrics: Metrics{
			Listen: "unix:/run/update-agent/metrics.sock",
		},
		FleetLock: FleetLock{MaxHold: Duration(2 * time.Hour), MaxWaiters: 64, AllowIDs: []string{}, AllowNetworks: []string{},
			Proxies: []string{}, Groups: []FleetLockGroup{}},
		Identity: Identity{Group: "default", RolloutWariness: WarinessAuto},
	}
}

// Package doctor checks, one line each, what the agent needs from the host
// and the cluster: etcd reachable with the configured TLS and auth, the
// local member and how it was found, leader, health, alarms, etcd's
// metrics, the etcd unit's cgroup, rpm-ostree, the staging disks and the
// lock. Each check talks through a small interface (adapters.go has the
// real ones), so the report is tested with fakes.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/iosched"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/rpmostree"
)

// Etcd is what the etcd checks ask.
type Etcd interface {
	// Probe does one read that needs the connection, TLS and auth accepted,
	// and says where it got an answer.
	Probe(ctx context.Context) (string, error)
	Members(ctx context.Context) ([]etcdmember.Member, error)
	LocalMatch(ctx context.Context) (etcdmember.Match, error)
	Health(ctx context.Context) (etcdmember.Health, error)
	Alarms(ctx context.Context) ([]string, error)
	// Rights says whether etcd has auth on and whether the configured
	// user may make admin calls (MoveLeader is one).
	Rights(ctx context.Context) (Rights, error)
}

// Rights is what etcd lets the agent's user do.
type Rights struct {
	Auth  bool // etcd has authentication on
	Admin bool // the user has the root role
}

// Lock reads the configured group's slots and holders.
type Lock interface {
	Status(ctx context.Context) ([]lock.GroupStatus, error)
}

// OS reads rpm-ostree's status (rpmostree.Client).
type OS interface {
	Status(ctx context.Context) (*rpmostree.Status, error)
}

// Cgroups says whether a unit's (or a named process's) cgroup exists, and
// where.
type Cgroups interface {
	UnitCgroup(ctx context.Context, unit string) (string, error)
	ProcessCgroup(comm string) (string, error)
}

// Disks resolves the disks behind paths and reads their schedulers.
type Disks interface {
	Disks(paths []string) ([]string, error)
	// Scheduler returns the selected scheduler and those offered.
	Scheduler(disk string) (string, []string, error)
	// Filesystems are the file systems holding paths, in paths' order.
	Filesystems(paths []string) ([]iosched.Filesystem, error)
	// WholeDisks resolves a block device's kernel name (vda1, dm-0) to
	// the whole disks under it; a whole disk to itself.
	WholeDisks(name string) ([]string, error)
}

// Metrics fetches guard.metrics_url.
type Metrics interface {
	Fetch(ctx context.Context, url string) (io.ReadCloser, error)
}

// Updates checks the update source.
type Updates interface {
	Check(ctx context.Context) (string, error)
}

// Gates evaluates the reboot gates (gates.Checker).
type Gates interface {
	Check(ctx context.Context) []gates.Result
}

// Inputs are the configuration the checks need.
type Inputs struct {
	Endpoints    []string
	MaxLag       uint64
	LockEnabled  bool
	LockGroup    string
	LockSlots    int
	GuardEnabled bool
	MetricsURL   string
	LocalUnit    string
	LocalProcess string // etcd.local_process: the member no unit runs
	StagingPaths []string
	Scheduler    string // staging.scheduler, "" = leave alone
	Username     string // etcd.username, "" = the client certificate's name
	MoveLeader   bool   // leader.move_leader: needs an admin user
	// Source and Image are updates.source and updates.image: the origin
	// line says how the rpm-ostree backend follows the booted origin.
	Source string
	Image  string
	// SourceFile is the file that set updates.source; HostGraph is the
	// update graph the host's zincati configuration names (HostGraphFile
	// sets it; "" = none): the origin line fails while Source is not the
	// graph (origin.go).
	SourceFile, HostGraph, HostGraphFile string
	// HostGraphErr: zincati's configuration could not be read (the origin
	// line fails with it while Source is not the graph).
	HostGraphErr error
	// DriverName is the update-driver name the daemon registers with
	// rpm-ostree: any other registered driver (zincati) fails the check.
	DriverName string
	// StateDir is agent.state_dir: records set aside there as unreadable
	// fail the "records" check until an operator deletes them. "": no
	// such check.
	StateDir string
	// FleetLockListen and FleetLockTLS: fleetlock.listen and whether
	// fleetlock.cert_file is set; the FleetLock line is added when listen
	// is set.
	FleetLockListen string
	FleetLockTLS    bool
	// ServeLocalMember is fleetlock.serve_local_member (set in
	// ServeLocalMemberFile): its line checks that this host's zincati
	// asks the local server (Zincati, read with HostGraphErr).
	ServeLocalMember     bool
	ServeLocalMemberFile string
	Zincati              ZincatiReboots
	// IOCost is staging.iocost; IOCostModels staging.iocost_models by
	// disk; EtcdIOLatencyTarget staging.etcd_io_latency_target.
	IOCost              iocost.Mode
	IOCostModels        map[string]iocost.Model
	EtcdIOLatencyTarget time.Duration
	// MemoryHigh is staging.memory_high's fixed bound in bytes (0: none),
	// MemoryHighAuto its "auto" (each window's choice).
	MemoryHigh     uint64
	MemoryHighAuto bool
	// WriteRateAuto and WriteBandwidthMax are
	// staging.io_write_bandwidth_max: "auto", or a fixed rate in bytes
	// per second (0: no cap).
	WriteRateAuto     bool
	WriteBandwidthMax uint64
	// UpdatesDisabled and PaceForeign are updates.enabled = false and
	// staging.pace_foreign: with updates off, the "companion mode" line
	// says whether other updaters' transactions are paced; in companion
	// mode (both) another updater's driver registration and update graph
	// are expected, not failures.
	UpdatesDisabled, PaceForeign bool
	// StagingUnit and DaemonUnit are the units the window weights with
	// IOWeight (staging.io_weight, or staging.iocost_io_weight under
	// iocost); IOCostEtcdIOWeight goes on LocalUnit under iocost.
	StagingUnit, DaemonUnit                      string
	IOWeight, IOCostIOWeight, IOCostEtcdIOWeight uint64
	// IOCostBrake is guard.iocost_brake; BrakeFactor guard.latency_factor.
	IOCostBrake bool
	BrakeFactor float64
}

// companionMode: another updater drives the host; the agent paces it.
func (in Inputs) companionMode() bool { return in.UpdatesDisabled && in.PaceForeign }

// Doctor runs the checks.
type Doctor struct {
	In      Inputs
	Etcd    Etcd
	Lock    Lock
	OS      OS
	Cgroups Cgroups
	Disks   Disks
	Metrics Metrics
	IO      IOControl
	// Gates, when set, adds the reboot gates' line.
	Gates Gates
	// Backend, when set, adds the update backend's line: which one
	// (updates.backend resolved on this host), why, and what it reads.
	Backend func(ctx context.Context) (string, error)
	// Owners, when set, adds the line of the host's other updaters that
	// could reboot it without a slot (bootc's timer: agent/owner).
	Owners func(ctx context.Context) (string, error)
	// MachineConfig, when set, adds the machine-config-daemon's line
	// (agent/owner.DescribeMCD).
	MachineConfig func(ctx context.Context) (string, error)
	// Updates, when set, adds updates.source's line (for the update graph:
	// its reachability and the booted release's place in it).
	Updates Updates
	// LockOff, with lock.enabled = false, says whether this host runs an
	// etcd member (nil: a worker; an error: a member, or it cannot tell):
	// the daemon refuses to run so beside one.
	LockOff func(ctx context.Context) error
	// CompanionTrigger, when set, is the cgroup directory companion
	// mode's trigger reads (the daemon unit's, from systemd): said on the
	// companion line.
	CompanionTrigger func(ctx context.Context) (string, error)
	// DialFleetLock connects to a FleetLock server's host:port (the
	// local member's line); nil: not tried.
	DialFleetLock func(ctx context.Context, addr string) error
	// Timeout bounds each check (default 10s).
	Timeout time.Duration
}

// Run runs every check in order; a check that cannot run fails with the
// reason, and the others still run.
func (d Doctor) Run(ctx context.Context) Report {
	var r Report
	add := func(check string, f func(ctx context.Context) (string, error)) bool {
		t := d.Timeout
		if t == 0 {
			t = 10 * time.Second
		}
		cctx, cancel := context.WithTimeout(ctx, t)
		defer cancel()
		detail, err := f(cctx)
		if err != nil {
			var w waiting
			var wn warning
			r = append(r, Result{Check: check, Detail: err.Error(), Wait: errors.As(err, &w), Warn: errors.As(err, &wn)})
			return false
		}
		r = append(r, Result{Check: check, OK: true, Detail: detail})
		return true
	}
	etcdChecks := []struct {
		name string
		f    func(context.Context) (string, error)
	}{
		{"etcd rights", d.rights},
		{"local member", d.localMember},
		{"leader", d.leader},
		{"member health", d.health},
		{"etcd alarms", d.alarms},
	}
	notChecked := func(check string) {
		r = append(r, Result{Check: check, Detail: "not checked: etcd did not answer", Skip: true})
	}
	etcdOK := add("etcd", d.reach)
	for _, c := range etcdChecks {
		if etcdOK {
			add(c.name, c.f)
		} else {
			notChecked(c.name)
		}
	}
	add("etcd metrics", d.metrics)
	add("etcd cgroup", d.cgroup)
	if add("rpm-ostree", d.rpmOstree) {
		add("origin", d.origin)
	} else {
		r = append(r, Result{Check: "origin", Detail: "not checked: rpm-ostree status unreadable"})
	}
	if d.Backend != nil {
		add("backend", d.Backend)
	}
	if d.Owners != nil {
		add("bootc updater", d.Owners)
	}
	if d.MachineConfig != nil {
		add("machine config", d.MachineConfig)
	}
	if d.In.UpdatesDisabled {
		add("companion mode", d.companion)
	}
	if d.Updates != nil {
		add("update source", d.Updates.Check)
	}
	add("staging disks", d.disks)
	add("io control", d.ioControl)
	r = append(r, d.pacing()...)
	if len(d.In.IOCostModels) > 0 {
		r = append(r, d.iocostModels())
	}
	if etcdOK || !d.In.LockEnabled {
		add("reboot lock", d.lock)
	} else {
		notChecked("reboot lock")
	}
	if d.Gates != nil {
		add("reboot gates", d.gates)
	}
	if d.In.StateDir != "" {
		add("records", d.records)
	}
	if d.In.FleetLockListen != "" {
		add("fleetlock", d.fleetLock)
	}
	if d.In.ServeLocalMember {
		r = append(r, d.zincatiMember(ctx))
	}
	return r
}

// records fails while a record the agent could not parse lies set aside
// (atomicfile.SetAside): what it recorded was undone only as far as the
// agent could without it, and the journal line at the time said what.
func (d Doctor) records(context.Context) (string, error) {
	aside, err := atomicfile.SetAsideIn(d.In.StateDir)
	if err != nil {
		return "", fmt.Errorf("listing %s: %w", d.In.StateDir, err)
	}
	if len(aside) > 0 {
		return "", fmt.Errorf("unreadable record(s) set aside: %s; the journal says what was recovered without them; delete them once checked",
			strings.Join(aside, ", "))
	}
	return "none set aside in " + d.In.StateDir, nil
}

func (d Doctor) metrics(ctx context.Context) (string, error) {
	switch {
	case !d.In.GuardEnabled:
		return "guard.enabled = false: not needed", nil
	case d.In.MetricsURL == "":
		return `guard.metrics_url = "": the guard paces on kernel signals only`, nil
	}
	body, err := d.Metrics.Fetch(ctx, d.In.MetricsURL)
	if err != nil {
		return "", fmt.Errorf("guard.metrics_url %s: %w", d.In.MetricsURL, err)
	}
	defer body.Close()
	h, err := guard.ParseHistograms(io.LimitReader(body, 64<<20), guard.MetricWALFsync)
	if err != nil {
		return "", fmt.Errorf("guard.metrics_url %s: %w", d.In.MetricsURL, err)
	}
	w, ok := h[guard.MetricWALFsync]
	if !ok {
		return "", fmt.Errorf("guard.metrics_url %s answers without etcd's %s histogram", d.In.MetricsURL, guard.MetricWALFsync)
	}
	return fmt.Sprintf("%s serves %s (%d fsyncs so far)", d.In.MetricsURL, guard.MetricWALFsync, w.Total()), nil
}

func (d Doctor) cgroup(ctx context.Context) (string, error) {
	if d.In.LocalProcess != "" {
		p, err := d.Cgroups.ProcessCgroup(d.In.LocalProcess)
		if err != nil {
			return "", fmt.Errorf("etcd.local_process %s: %w", d.In.LocalProcess, err)
		}
		return fmt.Sprintf("etcd.local_process %s runs in %s", d.In.LocalProcess, p), nil
	}
	if d.In.LocalUnit == "" {
		return `etcd.local_unit = "": no etcd unit on this host to watch`, nil
	}
	p, err := d.Cgroups.UnitCgroup(ctx, d.In.LocalUnit)
	if err != nil {
		return "", fmt.Errorf("etcd.local_unit %s: %w", d.In.LocalUnit, err)
	}
	return fmt.Sprintf("etcd.local_unit %s runs in %s", d.In.LocalUnit, p), nil
}

// booted reads rpm-ostree's status and its booted deployment.
func (d Doctor) booted(ctx context.Context) (*rpmostree.Status, rpmostree.Deployment, error) {
	st, err := d.OS.Status(ctx)
	if err != nil {
		return nil, rpmostree.Deployment{}, err
	}
	b, ok := st.Booted()
	if !ok {
		return nil, rpmostree.Deployment{}, fmt.Errorf("rpm-ostree status lists no booted deployment")
	}
	return st, b, nil
}

func (d Doctor) rpmOstree(ctx context.Context) (string, error) {
	st, b, err := d.booted(ctx)
	if err != nil {
		return "", err
	}
	s := fmt.Sprintf("status readable: booted %s", b.Checksum)
	if b.Version != "" {
		s += " (" + b.Version + ")"
	}
	if dr := st.UpdateDriver; dr != nil {
		if d.In.DriverName != "" && dr.Name != d.In.DriverName && !d.In.companionMode() {
			return "", fmt.Errorf("%s; updates are driven by %s (%s): the daemon refuses to start beside it; "+
				"on an update-agent host run `systemctl mask --now %s`", s, dr.Name, dr.Unit, dr.Unit)
		}
		s += fmt.Sprintf(", update driver %s", dr.Name)
	}
	return s, nil
}

func (d Doctor) disks(context.Context) (string, error) {
	if len(d.In.StagingPaths) == 0 {
		return "staging.paths is empty: no disk scheduler is changed", nil
	}
	disks, err := d.Disks.Disks(d.In.StagingPaths)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, disk := range disks {
		cur, offered, err := d.Disks.Scheduler(disk)
		if err != nil {
			return "", fmt.Errorf("scheduler of %s: %w", disk, err)
		}
		p := fmt.Sprintf("%s: %s", disk, cur)
		if d.In.Scheduler != "" && d.In.Scheduler != cur && !contains(offered, d.In.Scheduler) {
			p += fmt.Sprintf(" (%s not offered yet: its module is loaded when staging)", d.In.Scheduler)
		}
		parts = append(parts, p)
	}
	return fmt.Sprintf("%s on %s", strings.Join(d.In.StagingPaths, ", "), strings.Join(parts, "; ")), nil
}

func (d Doctor) lock(ctx context.Context) (string, error) {
	if !d.In.LockEnabled {
		if d.LockOff != nil {
			if err := d.LockOff(ctx); err != nil {
				return "", err
			}
		}
		return "lock.enabled = false: this node reboots without a slot (no etcd member found on this host)", nil
	}
	gs, err := d.Lock.Status(ctx)
	if err != nil {
		return "", err
	}
	s := fmt.Sprintf("group %s: 0 of %d slot(s) held, 0 waiting", d.In.LockGroup, d.In.LockSlots)
	for _, g := range gs {
		if g.Group != d.In.LockGroup {
			continue
		}
		s = fmt.Sprintf("group %s: %d of %d slot(s) held, %d waiting", g.Group, len(g.Holders), g.Slots, len(g.Waiters))
		var hs []string
		for _, h := range g.Holders {
			hs = append(hs, h.Node)
		}
		if len(hs) > 0 {
			s += "; holders " + strings.Join(hs, ", ")
		}
		if why := lock.SlotsDisagreement(g, d.In.LockSlots); why != "" {
			return "", warning{errors.New(s + "; " + why)}
		}
	}
	return s, nil
}

// gates says WAIT when a gate would hold a reboot now, naming each, and
// fails when a gate cannot be evaluated at all.
func (d Doctor) gates(ctx context.Context) (string, error) {
	rs := d.Gates.Check(ctx)
	if hold, why := gates.Holding(rs); hold {
		err := errors.New("holding a reboot: " + why)
		if slices.ContainsFunc(rs, func(r gates.Result) bool { return r.Unknown }) {
			return "", err
		}
		return "", waiting{err}
	}
	var seen []string
	for _, r := range rs {
		seen = append(seen, r.Gate+": "+r.Reason)
	}
	if len(seen) == 0 {
		return "none configured", nil
	}
	return strings.Join(seen, "; "), nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

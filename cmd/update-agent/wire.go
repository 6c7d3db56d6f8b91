package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/metrics"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/state"
)

// Retry policy of a failing target; not configurable: max_attempts bounds
// how often a target is tried.
const (
	retryBase       = 5 * time.Minute
	retryMax        = 2 * time.Hour
	retryJitter     = 0.5
	recheckInterval = 30 * time.Second
	rebootTimeout   = 10 * time.Minute
)

// agent is the daemon's parts, built from the configuration.
type agent struct {
	cfg      *config.Config
	root     string
	node     string
	stateDir string
	log      *slog.Logger

	os     adapters.OS
	graph  *graph.Source // nil unless updates.source = "graph"
	stager *adapters.Stager
	// osPort and stagerPort are the engine's: rpm-ostree's above, or
	// bootc's (updates.backend, wire_bootc.go).
	osPort     engine.OS
	stagerPort engine.Stager
	backend    chosenBackend
	// baseline is the rolling latency baseline the daemon keeps while no
	// staging runs (nil without the guard).
	baseline *guard.Keeper
	// live is the open staging window's pacing, brake and etcd latency
	// (status, the metrics); read-only outside the stager.
	live *guard.Board
	etcd *clientv3.Client // nil without lock and etcd
	lock *adapters.Lock   // nil when locking is disabled
	// lockOff checks that a host without the lock runs no etcd member
	// (nil with the lock).
	lockOff *lockOff
	// lockPort is the engine's lock: lock, or without it lockOffLock.
	lockPort engine.Lock
	cluster  *adapters.Cluster
	metrics  *metrics.Metrics
	engine   *engine.Engine
	window   engine.Window
	status   func(string)
	// gateLog is the reboot gates' last evaluation, for status.
	gateLog *adapters.GateLog
	// starting is set while the daemon has not read the OS status yet.
	starting atomic.Pointer[startingState]
	// companion paces foreign transactions (staging.pace_foreign); nil
	// otherwise.
	companion *companion
}

// rooted prefixes an absolute host path with --root (tests, the guest).
func rooted(root, p string) string {
	if root == "" || root == "/" || p == "" {
		return p
	}
	return filepath.Join(root, p)
}

// wire builds the agent from cfg. It talks to nothing yet: etcd may come up
// after the agent, and every port retries on its own.
func wire(cfg *config.Config, root string, log *slog.Logger, status func(string), beat func()) (*agent, error) {
	if err := cfg.CheckDaemon(); err != nil {
		return nil, configError{err}
	}
	a := &agent{cfg: cfg, root: root, log: log, stateDir: rooted(root, cfg.Agent.StateDir), status: status}
	node, err := cfg.Agent.Node()
	if err != nil {
		return nil, configError{err}
	}
	a.node = node
	a.log = log.With("node", a.node, "group", cfg.Lock.Group)
	a.metrics = metrics.New(version)

	client := newClient(cfg, a.log)
	a.os = adapters.OS{Client: client, Log: a.log, LockErr: &adapters.LastError{}, Lock: rpmostree.FinalizationLock{
		Ostree: cfg.Agent.Ostree, Runner: oplog.Runner{Log: a.log}, LegacyFile: rooted(root, rpmostree.LegacyLockFile)}}
	if cfg.Updates.Source == config.SourceImage {
		a.os.Image = cfg.Updates.Image
	}
	a.live = &guard.Board{}
	a.metrics.WatchPacing(a.live)
	a.stager, a.baseline = newStager(cfg, root, a.stateDir, client, a.live, a.log)
	if cfg.Updates.Source == config.SourceGraph {
		a.graph = newGraphSource(cfg, root, a.log)
		a.graph.Observer = metrics.NewGraph(a.metrics.Registry)
		a.os.Graph = a.graph // newStager made the stager exact
	}
	a.stager.Done = func(rep stage.Report, _ error) {
		a.metrics.GuardDecisions("freeze", rep.Guard.Freezes)
		a.metrics.GuardDecisions("forced_thaw", rep.Guard.ForcedThaws)
		a.metrics.Frozen(rep.Guard.Frozen)
		a.metrics.Paced(rep.Pacing)
	}
	if companionMode(cfg) {
		a.companion = &companion{status: client, pacer: a.stager, every: companionPoll, log: a.log, done: a.stager.Done,
			trigger: newCgroupTrigger(rooted(root, "/sys/fs/cgroup"), rpmOstreeDaemon, &systemdCgroups{}, a.log)}
	}
	if err := a.wireBackend(client); err != nil {
		return nil, err
	}

	if cfg.Lock.Enabled {
		if err := a.wireEtcd(); err != nil {
			return nil, err
		}
	} else if a.lockOff, err = newLockOff(cfg, root, a.log); err != nil {
		return nil, err
	}

	a.window = engine.Always{}
	if cfg.Reboot.Strategy == config.StrategyPeriodic {
		ws, err := cfg.Reboot.ParseWindows()
		if err != nil {
			return nil, configError{fmt.Errorf("reboot.windows: %w", err)}
		}
		a.window = ws
	}

	// cfg is validated (config.Load): every hook has a command.
	var hooks engine.HookRunner
	hooks.Log = a.log
	for i, h := range cfg.Reboot.Hooks {
		hooks.Hooks = append(hooks.Hooks, engine.Hook{
			Name:    fmt.Sprintf("%d:%s", i+1, filepath.Base(h.Argv[0])),
			Argv:    h.Argv,
			Timeout: h.Timeout.D(),
		})
	}

	gateCheck, host, err := a.wireGates()
	if err != nil {
		return nil, err
	}
	o := engine.Options{
		OS:      a.osPort,
		Stager:  a.stagerPort,
		Hooks:   hooks,
		Gates:   gateCheck,
		Host:    host,
		Store:   state.Store{Dir: a.stateDir, Log: a.log},
		BootID:  func() (string, error) { return readBootID(root) },
		Policy:  a.policy(),
		Log:     a.log,
		Metrics: a.metrics,
		Status:  status,
		Beat:    beat,
	}
	if a.lock != nil {
		a.lockPort, o.Cluster = a.lock, a.cluster
	} else {
		a.lockPort = lockOffLock{check: a.lockOff.Check}
	}
	o.Lock = a.lockPort
	a.engine = engine.New(o)
	return a, nil
}

func (a *agent) policy() engine.Policy {
	c := a.cfg
	return engine.Policy{
		Disabled:        !c.Updates.Enabled,
		CheckInterval:   c.Agent.CheckInterval.D(),
		CheckJitter:     c.Agent.CheckJitter.D(),
		Retry:           engine.Backoff{Base: retryBase, Max: retryMax, Jitter: retryJitter},
		MaxFailures:     c.Updates.MaxAttempts,
		Window:          a.window,
		MoveLeader:      c.Leader.MoveLeader,
		FollowersGrace:  c.Leader.FollowersGrace.D(),
		RequireSafe:     c.Leader.RequireQuorum,
		RecheckInterval: recheckInterval,
		RebootTimeout:   rebootTimeout,
		LoggedInDelay:   c.Reboot.LoggedInDelay.D(), // no sessions are counted without reboot.notify_users
		// Only the graph can say a staged release was pulled.
		RecheckStaged: c.Updates.Source == config.SourceGraph,
	}
}

// wireEtcd builds the etcd client, the member checks and the lock.
func (a *agent) wireEtcd() error {
	c := a.cfg
	cli, err := etcdclient.New(etcdClientOptions(c, a.root))
	if err != nil {
		return fmt.Errorf("setting up the etcd client: %w", err)
	}
	a.etcd = cli
	mo := memberOptions(c, a.log)
	if memberHost != nil {
		memberHost(&mo)
	}
	member := etcdmember.New(cli, mo)
	a.lock = &adapters.Lock{
		Node: a.node,
		OnPosition: func(p lock.Position) {
			if a.status != nil && !p.Holder {
				a.status(fmt.Sprintf("waiting_slot: waiting for a reboot slot of group %s: %d node(s) ahead, %d slot(s)", c.Lock.Group, p.Ahead, p.Slots))
			}
		},
		Make: func(ctx context.Context) (*lock.Lock, error) {
			boot, err := readBootID(a.root)
			if err != nil {
				return nil, err
			}
			// Like the boot ID: a test tree under --root may bring its own.
			midPath := rooted(a.root, lock.MachineIDPath)
			if _, err := os.Stat(midPath); err != nil {
				midPath = lock.MachineIDPath
			}
			return lock.New(cli, lock.Options{
				Prefix: c.Lock.KeyPrefix, Group: c.Lock.Group, Slots: c.Lock.Slots,
				TTL: c.Lock.RebootLeaseTTL.D(), Node: a.node, BootID: boot, LocalMember: localMemberName(member),
				MachineIDPath: midPath, StateDir: a.stateDir, MinInterval: c.Lock.MinInterval.D(), Log: a.log,
			})
		},
	}
	a.cluster = &adapters.Cluster{
		C:      member,
		Policy: memberPolicy(c, member.MaxLag()),
		Lock:   a.lock,
	}
	return nil
}

// memberPolicy is the ordering rules' policy of [leader] and etcd, for the
// agent's own reboot and its FleetLock server's local member alike.
func memberPolicy(c *config.Config, maxLag uint64) etcdmember.Policy {
	return etcdmember.Policy{FollowersFirst: c.Leader.FollowersFirst, MoveLeader: c.Leader.MoveLeader,
		RequireQuorum: c.Leader.RequireQuorum, AllowQuorumLoss: c.Etcd.AllowQuorumLoss, MaxLag: maxLag}
}

// localMemberName looks the local member up live for the lock: at every
// acquisition, adoption and fence (a worker may be promoted while the
// agent runs).
func localMemberName(member *etcdmember.Cluster) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		m, found, err := member.Local(ctx)
		if err != nil || !found {
			return "", err // the error says it was finding the local member
		}
		return m.Name, nil
	}
}

// memberHost, when set (tests), changes how the daemon's member lookup
// sees this host (its addresses, host name, local endpoints), so that a
// test can make it a member's host while it runs; nil in the daemon.
var memberHost func(*etcdmember.Options)

// memberOptions is how the daemon and doctor find the local member.
func memberOptions(c *config.Config, log *slog.Logger) etcdmember.Options {
	return etcdmember.Options{LocalName: c.Etcd.Member, LocalUnit: c.Etcd.LocalUnit, LocalProcess: c.Etcd.LocalProcess, Log: log}
}

// close lets go of what outlives the engine: the lock keeps its slot for the
// next process (Close does not release), the client closes.
func (a *agent) close() {
	if a.lock != nil {
		a.lock.Close()
	}
	if a.etcd != nil {
		a.etcd.Close()
	}
	if a.lockOff != nil {
		a.lockOff.close()
	}
}

// readBootID reads the boot ID under --root when a test tree provides one,
// else the host's.
func readBootID(root string) (string, error) {
	if p := rooted(root, state.BootIDPath); p != state.BootIDPath {
		if id, err := state.ReadBootID(p); err == nil {
			return id, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	return state.ReadBootID(state.BootIDPath)
}

// firstStatus waits for rpm-ostree to answer once: READY means the agent
// can see the host. rpm-ostreed may still be starting at boot.
func (a *agent) firstStatus(ctx context.Context, timeout time.Duration) (engine.OSStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		st, err := a.osPort.Status(ctx)
		if err == nil {
			return st, nil
		}
		a.log.Warn("reading the OS status failed; retrying", "backend", a.backend.Name, "err", err)
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("reading the OS status (%s): %w", a.backend.Name, err)
		case <-time.After(2 * time.Second):
		}
	}
}

// describe is the STATUS= line for a booted and staged deployment.
func describe(st engine.OSStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "booted %s", short(st.Booted.Checksum))
	if st.Staged != nil {
		fmt.Fprintf(&b, ", staged %s", short(st.Staged.Checksum))
	}
	return b.String()
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

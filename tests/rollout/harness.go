package rollout

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// The lock's keys, as configured by default.
const (
	Prefix = "/update-agent/lock"
	Group  = "control-plane"
)

// Options shape a fleet. Zero values give the defaults noted.
type Options struct {
	Bin standintest.Binaries
	// Etcd: members (default 3), heartbeat and election timeout (default
	// etcd's own, 100 ms and 1000 ms: the 10/100 ms of etcdtest turn a
	// late heartbeat on a loaded machine into an election).
	Etcd etcdtest.Options
	// Policy is every engine's policy. Zero intervals get fast ones: no
	// checks of their own (CheckInterval 1h: a rollout starts with
	// UpdateNow), RecheckInterval 200 ms, RebootTimeout 1 min, retries
	// after 1-5 s. MoveLeader and RequireSafe are taken as given; Leader
	// (followers first among them) must agree with them.
	Policy engine.Policy
	Leader etcdmember.Policy
	// TTL is the reboot lease (default 20 s).
	TTL time.Duration
	// Log receives every agent's log (default: a file, printed when the
	// test fails).
	Log io.Writer
}

// FollowersGrace is leader.followers_grace in the rollouts: the daemon's
// 20 min cover checks on the nodes' own schedules; here every agent is told
// to check at once, and a loaded CI host delays one by a second or two.
const FollowersGrace = 10 * time.Second

// LeaderAware is the daemon's default: followers first (the leader's node
// giving the others FollowersGrace to announce the update), leadership moved
// before the leader reboots, never a reboot that risks quorum.
func LeaderAware() (engine.Policy, etcdmember.Policy) {
	return engine.Policy{MoveLeader: true, RequireSafe: true, FollowersGrace: FollowersGrace},
		etcdmember.Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true}
}

// Unaware has the quorum check but no leader rules: the leader reboots
// whenever its turn comes and etcd hands leadership over as it stops.
func Unaware() (engine.Policy, etcdmember.Policy) {
	return engine.Policy{RequireSafe: true}, etcdmember.Policy{RequireQuorum: true}
}

// Fleet is the hosts of one etcd cluster, each running an agent.
type Fleet struct {
	T     testing.TB
	C     *etcdtest.Cluster
	Nodes []*Node
	// Admin talks to every member (the harness's own view, not an agent's).
	Admin *clientv3.Client

	o     Options
	log   io.Writer
	moves atomic.Int64

	mu         sync.Mutex
	reboots    []int           // node indexes in reboot order
	missing    []time.Duration // per reboot, in that order
	violations []string
}

// Node is one host: its stand-in, its etcd member, its agent.
type Node struct {
	I        int
	Name     string
	Member   string
	Env      *standintest.Env
	StateDir string
	Log      *slog.Logger

	boots  int
	bootID string
	eng    *engine.Engine
	cli    *clientv3.Client
	lk     *adapters.Lock
	cancel context.CancelFunc
	done   chan error
}

// New starts the cluster and one agent per member; all boot generation 0.
func New(t testing.TB, o Options) *Fleet {
	t.Helper()
	if o.Etcd.TickMs == 0 {
		o.Etcd.TickMs, o.Etcd.ElectionMs = 100, 1000
	}
	p := &o.Policy
	if p.CheckInterval == 0 {
		p.CheckInterval = time.Hour
	}
	if p.RecheckInterval == 0 {
		p.RecheckInterval = 200 * time.Millisecond
	}
	if p.RebootTimeout == 0 {
		p.RebootTimeout = time.Minute
	}
	if p.Retry.Base == 0 {
		p.Retry = engine.Backoff{Base: time.Second, Max: 5 * time.Second}
	}
	if p.MaxFailures == 0 {
		p.MaxFailures = 3
	}
	if o.TTL == 0 {
		o.TTL = 20 * time.Second
	}
	f := &Fleet{T: t, o: o, log: o.Log}
	if f.log == nil {
		lf, err := os.Create(filepath.Join(t.TempDir(), "agents.log"))
		if err != nil {
			t.Fatal(err)
		}
		f.log = lf
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(lf.Name())
				t.Logf("agents' log:\n%s", b)
			}
		})
	}
	f.C = etcdtest.Start(t, o.Etcd)
	f.Admin = f.C.Client(t, nil)
	for i, m := range f.C.Members {
		n := &Node{I: i, Name: fmt.Sprintf("node-%d", i), Member: m.Name,
			Env: standintest.New(t, o.Bin), StateDir: t.TempDir()}
		n.Log = slog.New(slog.NewTextHandler(f.log, nil)).With("node", n.Name)
		n.bootID = fmt.Sprintf("%s-boot-0", n.Name)
		f.Nodes = append(f.Nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range f.Nodes {
			f.stop(n)
		}
	})
	for _, n := range f.Nodes {
		f.Start(n)
	}
	return f
}

// Engine is the node's running agent.
func (n *Node) Engine() *engine.Engine { return n.eng }

// Start starts the node's agent as the daemon wires it: an etcd client on
// the local member only (the default endpoint), the lock built on first
// use, the member checks, the rpm-ostree client and the state store.
func (f *Fleet) Start(n *Node) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{f.C.Members[n.I].ClientURL},
		DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		f.T.Fatalf("%s: etcd client: %v", n.Name, err)
	}
	client := &rpmostree.Client{Path: f.o.Bin.RpmOstree, Runner: oplog.Runner{Log: n.Log,
		Env: n.Env.ClientEnv("update-agent.service"), Interrupt: syscall.SIGINT}}
	member := etcdmember.New(cli, etcdmember.Options{LocalName: n.Member, Log: n.Log})
	boot := n.bootID
	n.lk = &adapters.Lock{Node: n.Name, Make: func(ctx context.Context) (*lock.Lock, error) {
		return lock.New(cli, lock.Options{Prefix: Prefix, Group: Group, Slots: 1, TTL: f.o.TTL,
			Node: n.Name, BootID: boot, Member: n.Member, StateDir: n.StateDir, Log: n.Log})
	}}
	lp := f.o.Leader
	lp.MaxLag = member.MaxLag()
	n.cli = cli
	n.eng = engine.New(engine.Options{
		OS: adapters.OS{Client: client}, Stager: adapters.PlainStager{Client: client},
		Lock: n.lk, Cluster: &adapters.Cluster{C: member, Lock: n.lk, Policy: lp},
		Store: state.Store{Dir: n.StateDir}, BootID: func() (string, error) { return boot, nil },
		Policy: f.o.Policy, Log: n.Log, Metrics: (*metrics)(f), BeatInterval: time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- n.eng.Run(ctx) }()
}

// stop stops the agent as systemd does (its lease and slot outlive it).
func (f *Fleet) stop(n *Node) {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	if err := <-n.done; err != nil {
		f.T.Errorf("%s: agent: %v", n.Name, err)
	}
	n.lk.Close()
	n.cli.Close()
}

// Crash stops a node's agent and starts a new one from its state
// directory, in the same boot.
func (f *Fleet) Crash(n *Node) {
	f.stop(n)
	f.Start(n)
}

// Step reboots every node whose agent asked for it (finalize ran the
// stand-in's reboot command) and returns how many did.
func (f *Fleet) Step() int {
	k := 0
	for _, n := range f.Nodes {
		if n.Env.Rebooted() {
			f.Reboot(n)
			k++
		}
	}
	return k
}

// Reboot is the host going down for the finalize it asked for: the agent
// stops (SIGTERM), the etcd member stops, the shutdown hook applies the
// unlocked deployment, the member and a new agent come back in a new boot.
// A reboot while another member is down is recorded as a violation.
func (f *Fleet) Reboot(n *Node) {
	f.stop(n)
	for j := range f.Nodes {
		if j != n.I && !f.C.Running(j) {
			f.violate(fmt.Sprintf("%s rebooted while member %s was down", n.Name, f.C.Members[j].Name))
		}
	}
	down := time.Now()
	f.C.Stop(n.I)
	n.Env.PlannedReboot()
	n.boots++
	n.bootID = fmt.Sprintf("%s-boot-%d", n.Name, n.boots)
	if err := f.C.Restart(n.I); err != nil {
		f.T.Fatal(err)
	}
	f.mu.Lock()
	f.reboots = append(f.reboots, n.I)
	f.missing = append(f.missing, time.Since(down))
	f.mu.Unlock()
	f.Start(n)
}

func (f *Fleet) violate(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.violations = append(f.violations, msg)
}

// Violations are the reboots that happened while another member was down.
func (f *Fleet) Violations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.violations...)
}

// Reboots are the node indexes in reboot order, since the fleet started.
func (f *Fleet) Reboots() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.reboots...)
}

// Moves counts successful MoveLeader calls of all agents.
func (f *Fleet) Moves() int64 { return f.moves.Load() }

// Booted is the deployment the node's stand-in has booted.
func (f *Fleet) Booted(n *Node) string {
	f.T.Helper()
	out, _, code := n.Env.CLI("", "status", "--json")
	if code != 0 {
		f.T.Fatalf("%s: status exit %d", n.Name, code)
	}
	st, err := rpmostree.ParseStatus([]byte(out))
	if err != nil {
		f.T.Fatal(err)
	}
	b, _ := st.Booted()
	return b.Target()
}

// Done reports whether every agent is idle on its target, waiting.
func (f *Fleet) Done(targets []string) bool {
	for i, n := range f.Nodes {
		s := n.eng.Snapshot()
		if s.State.Phase != state.Idle || s.State.Queued || s.OS.Booted.Checksum != targets[i] || s.Action.Kind != engine.ActWait {
			return false
		}
	}
	return true
}

// LockEmpty returns an error unless the group has no holder, waiter or
// announcement left.
func (f *Fleet) LockEmpty(ctx context.Context) error {
	gs, err := lock.Status(ctx, f.Admin, Prefix, 1, Group, time.Now())
	if err != nil {
		return err
	}
	for _, g := range gs {
		if len(g.Holders)+len(g.Waiters)+len(g.Pending) > 0 {
			return fmt.Errorf("lock not empty: %+v", g)
		}
	}
	return nil
}

// metrics counts the agents' planned leader moves.
type metrics Fleet

func (m *metrics) SetPhase(state.Phase)             {}
func (m *metrics) StagingDone(time.Duration, error) {}
func (m *metrics) LockWaited(time.Duration)         {}
func (m *metrics) LeaderMoved()                     { m.moves.Add(1) }
func (m *metrics) Failed(string)                    {}

var _ engine.Metrics = (*metrics)(nil)

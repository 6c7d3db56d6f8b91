// Package cycle runs the whole update flow without a VM: three agents'
// engines with the real adapters, each host an rpm-ostree stand-in doing
// real ostree I/O (its reboot command a test hook), coordinated through a
// real embedded 3-member etcd cluster whose members go down and up with
// their hosts. Staging runs the CLI directly (no systemd here); the gentle
// staging is tested in the guest.
package cycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
	"github.com/update-agent/update-agent/tests/testlog"
)

const (
	prefix = "/update-agent/lock"
	group  = "control-plane"
)

var bin standintest.Binaries

func TestMain(m *testing.M) { standintest.Main(m, &bin) }

// node is one host: its stand-in, its etcd member, its agent.
type node struct {
	i        int
	name     string
	member   string
	env      *standintest.Env
	stateDir string
	bootID   string
	target   string
	log      *slog.Logger

	eng    *engine.Engine
	lk     *adapters.Lock
	cancel context.CancelFunc
	done   chan error
}

type rollout struct {
	t     *testing.T
	c     *etcdtest.Cluster
	cli   *clientv3.Client
	nodes []*node
	logw  io.Writer

	mu      sync.Mutex
	reboots []string // node names in reboot order
}

func (r *rollout) start(n *node) {
	client := &rpmostree.Client{Path: bin.RpmOstree, Runner: oplog.Runner{Log: n.log,
		Env: n.env.ClientEnv("update-agent.service"), Interrupt: syscall.SIGINT}}
	member := etcdmember.New(r.cli, etcdmember.Options{LocalName: n.member, Log: n.log})
	boot := n.bootID
	n.lk = &adapters.Lock{Node: n.name, Make: func(ctx context.Context) (*lock.Lock, error) {
		return lock.New(r.cli, lock.Options{Prefix: prefix, Group: group, Slots: 1, TTL: 20 * time.Second,
			Node: n.name, BootID: boot, Member: n.member, StateDir: n.stateDir, Log: n.log})
	}}
	cl := &adapters.Cluster{C: member, Lock: n.lk, Policy: etcdmember.Policy{FollowersFirst: true, MoveLeader: true,
		RequireQuorum: true, MaxLag: member.MaxLag()}}
	n.eng = engine.New(engine.Options{
		OS: adapters.OS{Client: client}, Stager: adapters.PlainStager{Client: client},
		Lock: n.lk, Cluster: cl, Store: state.Store{Dir: n.stateDir},
		BootID: func() (string, error) { return boot, nil },
		Policy: engine.Policy{CheckInterval: 200 * time.Millisecond, Retry: engine.Backoff{Base: time.Second, Max: 5 * time.Second},
			MaxFailures: 3, LeaderAware: true, MoveLeader: true, RequireSafe: true,
			RecheckInterval: 200 * time.Millisecond, RebootTimeout: time.Minute},
		Log: n.log, BeatInterval: time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- n.eng.Run(ctx) }()
}

// reboot is the host going down for the finalize it asked for: the agent
// stops (SIGTERM), the etcd member stops, the shutdown hook applies the
// unlocked deployment, the member and the agent come back in a new boot.
func (r *rollout) reboot(n *node) {
	r.mu.Lock()
	r.reboots = append(r.reboots, n.name)
	r.mu.Unlock()
	n.cancel()
	if err := <-n.done; err != nil {
		r.t.Errorf("%s: agent: %v", n.name, err)
	}
	n.lk.Close() // the lease (and the slot) outlive the agent
	for j := range r.nodes {
		if j != n.i && !r.c.Running(j) {
			r.t.Errorf("%s reboots while member %d is down", n.name, j)
		}
	}
	r.c.Stop(n.i)
	n.env.PlannedReboot()
	n.bootID += "+"
	if err := r.c.Restart(n.i); err != nil {
		r.t.Fatal(err)
	}
	r.start(n)
}

func (r *rollout) booted(n *node) string {
	out, _, code := n.env.CLI("", "status", "--json")
	if code != 0 {
		r.t.Fatalf("%s: status exit %d", n.name, code)
	}
	st, err := rpmostree.ParseStatus([]byte(out))
	if err != nil {
		r.t.Fatal(err)
	}
	b, _ := st.Booted()
	return b.Target()
}

func (r *rollout) finished() bool {
	for _, n := range r.nodes {
		s := n.eng.Snapshot()
		if s.State.Phase != state.Idle || s.OS.Booted.Checksum != n.target || s.Action.Kind != engine.ActWait {
			return false
		}
	}
	return true
}

// crash kills a node's agent (no release: the lease just stops being kept
// alive) and starts a new one from the state directory, in the same boot.
func (r *rollout) crash(n *node) {
	n.cancel()
	if err := <-n.done; err != nil {
		r.t.Errorf("%s: agent: %v", n.name, err)
	}
	n.lk.Close()
	r.start(n)
}

// TestRollingUpdate: three hosts find an update, stage it locked, reboot one
// at a time through the lock, followers first and the leader last after
// handing leadership over, and each releases its slot once its member is
// healthy again.
func TestRollingUpdate(t *testing.T) {
	// Not parallel: etcdtest picks ports that were free a moment ago.
	rollingUpdate(t, 0)
}

// TestRollingUpdateWithCrashes: the same while agents are killed and
// restarted every 300 ms, wherever they are: each resumes from its record
// and the lock's, and the rollout ends the same way.
func TestRollingUpdateWithCrashes(t *testing.T) {
	// Not parallel: etcdtest picks ports that were free a moment ago.
	rollingUpdate(t, 300*time.Millisecond)
}

func rollingUpdate(t *testing.T, crashEvery time.Duration) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	logf, err := os.Create(filepath.Join(t.TempDir(), "agents.log"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rollout{t: t, c: c, cli: c.Client(t, nil), logw: logf}
	for i := 0; i < 3; i++ {
		n := &node{i: i, name: fmt.Sprintf("node-%d", i), member: c.Members[i].Name,
			env: standintest.New(t, bin), stateDir: t.TempDir(), bootID: fmt.Sprintf("boot-%d", i)}
		n.log = slog.New(slog.NewTextHandler(logf, nil)).With("node", n.name)
		n.target = n.env.Publish(n.env.Ref, 1)
		r.nodes = append(r.nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range r.nodes {
			n.cancel()
			<-n.done
			n.lk.Close()
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("agents' log:\n%s", b)
		}
	})
	firstLeader := c.LeaderIndex()
	for _, n := range r.nodes {
		r.start(n)
	}

	leaders := []int{firstLeader}
	deadline := time.Now().Add(90 * time.Second)
	crashes, nextCrash := 0, time.Now().Add(crashEvery)
	for !r.finished() {
		if time.Now().After(deadline) {
			for _, n := range r.nodes {
				t.Logf("%s: %+v", n.name, n.eng.Snapshot())
			}
			t.Fatal("rollout did not finish in 90s")
		}
		for _, n := range r.nodes {
			if n.env.Rebooted() {
				r.reboot(n)
			}
		}
		if crashEvery > 0 && time.Now().After(nextCrash) {
			r.crash(r.nodes[crashes%len(r.nodes)])
			crashes++
			nextCrash = time.Now().Add(crashEvery)
		}
		if l := c.LeaderIndex(); l >= 0 && l != leaders[len(leaders)-1] {
			leaders = append(leaders, l)
		}
		time.Sleep(20 * time.Millisecond)
	}

	for _, n := range r.nodes {
		if b := r.booted(n); b != n.target {
			t.Errorf("%s booted %s, want %s", n.name, b, n.target)
		}
		if st := n.eng.Snapshot().State; len(st.Failures) > 0 || st.Queued {
			t.Errorf("%s ended with %+v", n.name, st)
		}
	}
	if len(r.reboots) != 3 {
		t.Errorf("reboots %v, want each node once", r.reboots)
	}
	if want := r.nodes[firstLeader].name; len(r.reboots) == 3 && r.reboots[2] != want {
		t.Errorf("reboot order %v: the first leader %s did not go last", r.reboots, want)
	}
	if len(leaders) != 2 {
		t.Errorf("leaders over the rollout: %v, want exactly one change", leaders)
	}
	gs, err := lock.Status(context.Background(), r.cli, prefix, 1, group, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if len(g.Holders)+len(g.Waiters)+len(g.Pending) > 0 {
			t.Errorf("lock not empty after the rollout: %+v", g)
		}
	}
	b, _ := os.ReadFile(logf.Name())
	for _, want := range []string{"moving leadership away", "holding reboot slot", "released reboot slot"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("agents' log never says %q", want)
		}
	}
	t.Logf("reboot order %v (first leader %s), leaders %v, agent crashes %d", r.reboots, r.nodes[firstLeader].name, leaders, crashes)
}

// gate is a reboot window a test opens.
type gate struct {
	mu   sync.Mutex
	open bool
}

func (g *gate) Contains(time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

func (g *gate) Next(t time.Time) time.Time {
	if g.Contains(t) {
		return t
	}
	return t.Add(100 * time.Millisecond) // look again soon
}

// solo is one agent on one stand-in host, no lock, its reboot window a gate;
// start and stop are the agent service starting and stopping.
type solo struct {
	t    *testing.T
	env  *standintest.Env
	dir  string
	logb testlog.Buffer
	log  *slog.Logger
	win  gate
	boot string

	eng    *engine.Engine
	cancel context.CancelFunc
	done   chan error
}

func newSolo(t *testing.T) *solo {
	a := &solo{t: t, env: standintest.New(t, bin), dir: t.TempDir(), boot: "boot-1"}
	a.log = slog.New(slog.NewTextHandler(&a.logb, nil))
	t.Cleanup(func() {
		a.stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", a.logb.String())
		}
	})
	return a
}

func (a *solo) start() {
	client := &rpmostree.Client{Path: bin.RpmOstree, Runner: oplog.Runner{Log: a.log,
		Env: a.env.ClientEnv("update-agent.service"), Interrupt: syscall.SIGINT}}
	b := a.boot
	a.eng = engine.New(engine.Options{OS: adapters.OS{Client: client}, Stager: adapters.PlainStager{Client: client},
		Store: state.Store{Dir: a.dir}, BootID: func() (string, error) { return b, nil }, Log: a.log,
		Policy: engine.Policy{CheckInterval: 200 * time.Millisecond, Retry: engine.Backoff{Base: time.Second, Max: time.Second},
			MaxFailures: 3, Window: &a.win, RecheckInterval: 200 * time.Millisecond, RebootTimeout: time.Minute}})
	var ctx context.Context
	ctx, a.cancel = context.WithCancel(context.Background())
	a.done = make(chan error, 1)
	go func() { a.done <- a.eng.Run(ctx) }()
}

func (a *solo) stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	if err := <-a.done; err != nil {
		a.t.Fatal(err)
	}
}

func (a *solo) wait(what string, cond func(engine.Snapshot) bool) {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(a.eng.Snapshot()) {
		if time.Now().After(deadline) {
			a.t.Fatalf("timed out waiting for %s: %+v", what, a.eng.Snapshot())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *solo) waitStaged(target string) {
	a.t.Helper()
	a.wait("staged and locked "+target+", waiting for the window", func(s engine.Snapshot) bool {
		return s.State.Phase == state.Staged && s.State.Locked == target && s.OS.Staged != nil && s.OS.Staged.Checksum == target
	})
}

// openWindowAndReboot opens the window, waits for the finalize, reboots the
// host and checks the agent comes back idle on target.
func (a *solo) openWindowAndReboot(target string) {
	a.t.Helper()
	a.win.mu.Lock()
	a.win.open = true
	a.win.mu.Unlock()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if !standintest.WaitFor(wctx, a.env.Rebooted) {
		a.t.Fatalf("no finalize once the window opened: %+v", a.eng.Snapshot())
	}
	a.stop()
	a.env.PlannedReboot()
	a.boot += "+"
	a.start()
	a.wait("idle on the target", func(s engine.Snapshot) bool {
		return s.State.Phase == state.Idle && s.OS.Booted.Checksum == target && s.Action.Kind == engine.ActWait
	})
}

// TestUnplannedRebootWhileStaged: a power cut while the update waits for
// its window loses the locked staged deployment (as on a real host: it lives
// in /run), and the agent stages it again; once the window opens the cycle
// completes.
func TestUnplannedRebootWhileStaged(t *testing.T) {
	t.Parallel()
	a := newSolo(t)
	target := a.env.Publish(a.env.Ref, 1)
	a.start()
	a.waitStaged(target)
	a.stop()
	a.env.UnplannedReboot()
	a.boot = "boot-2"
	out, _, _ := a.env.CLI("", "status", "--json")
	if st, _ := rpmostree.ParseStatus([]byte(out)); st != nil {
		if _, ok := st.Staged(); ok {
			t.Fatal("the stand-in kept the staged deployment over an unplanned reboot")
		}
	}
	a.start()
	a.waitStaged(target)
	if !strings.Contains(a.logb.String(), "unplanned reboot discarded the staged deployment") {
		t.Error("the agent did not say why it stages again")
	}
	a.openWindowAndReboot(target)
}

// TestNewerUpdateReplacesStaged: a release published while the staged one
// waits for its window replaces it (zincati#928), so the node reboots once,
// into the newest; the old deployment is not left behind.
func TestNewerUpdateReplacesStaged(t *testing.T) {
	t.Parallel()
	a := newSolo(t)
	first := a.env.Publish(a.env.Ref, 1)
	a.start()
	a.waitStaged(first)
	second := a.env.Publish(a.env.Ref, 2)
	a.waitStaged(second)
	if !strings.Contains(a.logb.String(), "update "+second+" is now offered and replaces staged "+first) {
		t.Error("the agent did not say why it stages again")
	}
	if co := a.env.Checkouts("fedora-coreos"); slices.ContainsFunc(co, func(c string) bool { return strings.HasPrefix(c, first) }) {
		t.Errorf("the replaced deployment's checkout is still there: %v", co)
	}
	a.openWindowAndReboot(second)
}

package cycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// node is one host: its stand-in, its etcd member, its agent process.
type node struct {
	i        int
	name     string
	member   string
	env      *standintest.Env
	stateDir string
	bootID   string
	target   string
	hold     bool // the reboot window stays closed

	cmd  *exec.Cmd
	done chan error
}

type rollout struct {
	t       *testing.T
	c       *etcdtest.Cluster
	cli     *clientv3.Client
	nodes   []*node
	logFile string

	reboots []string // node names in reboot order
}

// start starts the node's agent in a process of its own, in its own process
// group like a systemd unit's cgroup: a kill takes its rpm-ostree clients too.
func (r *rollout) start(n *node) {
	spec, err := json.Marshal(nodeSpec{Name: n.name, Member: n.member, StateDir: n.stateDir, BootID: n.bootID,
		RpmOstree: bin.RpmOstree, ClientEnv: n.env.ClientEnv("update-agent.service"),
		Endpoints: r.c.Endpoints(), LogFile: r.logFile, Hold: n.hold})
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec))
	out, err := os.OpenFile(r.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	n.cmd, n.done = cmd, make(chan error, 1)
	go func() { n.done <- cmd.Wait() }()
}

// kill is a crash: SIGKILL to the agent and its children, no cleanup, the
// lease just stops being kept alive.
func (r *rollout) kill(n *node) {
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
	n.cmd = nil
}

// stop is systemd stopping the unit for the reboot: SIGTERM to the group,
// SIGKILL after a timeout.
func (r *rollout) stop(n *node) {
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-n.done:
		if err != nil && !killedBySIGTERM(err) {
			r.t.Errorf("%s: agent stopped with %v", n.name, err)
		}
	case <-time.After(30 * time.Second):
		r.t.Errorf("%s: agent did not stop on SIGTERM in 30s", n.name)
		r.kill(n)
	}
	n.cmd = nil
}

// killedBySIGTERM: the process died of the signal itself, which happens when
// the stop comes before the Go runtime has installed the agent's handler (a
// node restarted after a kill while its finalize was in flight, then told to
// reboot). systemd counts that as a clean stop too.
func killedBySIGTERM(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// TestKilledBySIGTERMTellsTheSignalApart: only a death by SIGTERM counts as a
// clean stop; a non-zero exit or another signal does not.
func TestKilledBySIGTERMTellsTheSignalApart(t *testing.T) {
	for _, c := range []struct {
		sig  syscall.Signal
		want bool
	}{{syscall.SIGTERM, true}, {syscall.SIGKILL, false}, {0, false}} {
		cmd := exec.Command("sleep", "30")
		if c.sig == 0 {
			cmd = exec.Command("false")
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if c.sig != 0 {
			_ = cmd.Process.Signal(c.sig)
		}
		err := cmd.Wait()
		if got := killedBySIGTERM(err); got != c.want {
			t.Errorf("signal %v: killedBySIGTERM(%v) = %v, want %v", c.sig, err, got, c.want)
		}
	}
}

// reboot is the host going down for the finalize it asked for: the agent
// stops, the etcd member stops, the shutdown hook applies the unlocked
// deployment, the member and the agent come back in a new boot.
func (r *rollout) reboot(n *node) {
	r.reboots = append(r.reboots, n.name)
	r.stop(n)
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

func (r *rollout) record(n *node) state.State {
	st, err := state.Store{Dir: n.stateDir}.Load()
	if err != nil {
		r.t.Fatalf("%s: %v", n.name, err)
	}
	return st
}

func (r *rollout) lockStatus() lock.GroupStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := lock.Status(ctx, r.cli, prefix, 1, group, time.Now())
	if err != nil || len(gs) == 0 {
		return lock.GroupStatus{}
	}
	return gs[0]
}

// finished: every node's record is idle, each host booted its target and
// the lock is empty.
func (r *rollout) finished() bool {
	for _, n := range r.nodes {
		if st := r.record(n); st.Phase != state.Idle || st.Queued || st.Locked != "" {
			return false
		}
	}
	if g := r.lockStatus(); len(g.Holders)+len(g.Waiters)+len(g.Pending) > 0 {
		return false
	}
	for _, n := range r.nodes {
		if r.booted(n) != n.target {
			return false
		}
	}
	return true
}

// holdingPhases are the phases in which a node acts on its slot: between
// the acquire and the release (Releasing is left out: its record is written
// before the release, and the next node may hold by the time it is read).
var holdingPhases = []state.Phase{state.HoldingSlot, state.Finalizing, state.Verifying}

// holders watches the nodes' records and the lock for the whole rollout:
// never two nodes acting as slot holders at once (1 slot), and a node acting
// as holder is one in etcd.
type holders struct {
	mu         sync.Mutex
	max        int
	held       map[string]bool // nodes ever seen acting as holder
	violations []string
}

func (h *holders) watch(ctx context.Context, r *rollout) {
	h.held = map[string]bool{}
	load := func() []state.State {
		var out []state.State
		for _, n := range r.nodes {
			st, err := state.Store{Dir: n.stateDir}.Load()
			if err != nil {
				return nil
			}
			out = append(out, st)
		}
		return out
	}
	for ctx.Err() == nil {
		before := load()
		g := r.lockStatus()
		after := load()
		if before != nil && after != nil {
			var acting []string
			for i, n := range r.nodes {
				// Only a record that did not move while the lock was
				// read is compared with the lock.
				if !slices.Contains(holdingPhases, before[i].Phase) || !before[i].Equal(after[i]) {
					continue
				}
				acting = append(acting, n.name)
				if !slices.Contains(holderNames(g), n.name) {
					h.add(fmt.Sprintf("%s is %s without holding the slot in etcd (holders %v)", n.name, before[i].Phase, holderNames(g)))
				}
			}
			h.mu.Lock()
			h.max = max(h.max, len(acting))
			for _, a := range acting {
				h.held[a] = true
			}
			h.mu.Unlock()
			if len(acting) > 1 {
				h.add(fmt.Sprintf("%v act as slot holders at once", acting))
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *holders) add(v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.violations) < 20 {
		h.violations = append(h.violations, v)
	}
}

// TestRollingUpdate: three hosts find an update, stage it locked, reboot one
// at a time through the lock, followers first and the leader last after
// handing leadership over, and each releases its slot once its member is
// healthy again.
func TestRollingUpdate(t *testing.T) {
	// Not parallel: etcdtest picks ports that were free a moment ago.
	rollingUpdate(t, false)
}

// TestRollingUpdateWithCrashes: the same while agent processes are
// SIGKILLed at random moments (every 50-700 ms, whatever they are doing,
// half the time the node between acquire and release) and started again in the same boot: each resumes from its record
// and the lock's; never more than one slot holder, never a finalize without
// the slot, and the rollout ends the same way.
func TestRollingUpdateWithCrashes(t *testing.T) {
	// Not parallel: etcdtest picks ports that were free a moment ago.
	rollingUpdate(t, true)
}

func rollingUpdate(t *testing.T, crash bool) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	r := &rollout{t: t, c: c, cli: c.Client(t, nil), logFile: filepath.Join(t.TempDir(), "agents.log")}
	for i := 0; i < 3; i++ {
		n := &node{i: i, name: fmt.Sprintf("node-%d", i), member: c.Members[i].Name,
			env: standintest.New(t, bin), stateDir: t.TempDir(), bootID: fmt.Sprintf("boot-%d", i)}
		n.target = n.env.Publish(n.env.Ref, 1)
		r.nodes = append(r.nodes, n)
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var h holders
	watched := make(chan struct{})
	go func() { defer close(watched); h.watch(watchCtx, r) }()
	t.Cleanup(func() {
		stopWatch()
		<-watched
		for _, n := range r.nodes {
			if n.cmd != nil {
				r.kill(n)
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(r.logFile)
			t.Logf("agents' log:\n%s", b)
		}
	})
	firstLeader := c.LeaderIndex()
	for _, n := range r.nodes {
		r.start(n)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	leaders := []int{firstLeader}
	deadline := time.Now().Add(3 * time.Minute)
	kills := map[state.Phase]int{}
	nkills := 0
	nextKill := time.Now().Add(killDelay(rng))
	// The next kill waits for the last victim to make progress (its record
	// changes), so kills keep pace with the rollout whatever the machine's
	// speed: a fast idle run is crashed as often as a slow loaded one.
	var restarted *node
	var restartedRec state.State
	var restartedAt time.Time
	killedIn := map[string]bool{} // node/phase
	for !r.finished() {
		if time.Now().After(deadline) {
			for _, n := range r.nodes {
				t.Logf("%s: %+v", n.name, r.record(n))
			}
			t.Fatal("rollout did not finish in 3 minutes")
		}
		for _, n := range r.nodes {
			if !n.env.Rebooted() {
				continue
			}
			// The daemon ran its reboot command: finalize-deployment
			// was called. The slot must be held by this node alone.
			if g := r.lockStatus(); len(g.Holders) != 1 || g.Holders[0].Node != n.name {
				t.Errorf("%s finalized without holding the slot: holders %v", n.name, holderNames(g))
			}
			if c.LeaderIndex() == n.i {
				t.Errorf("%s finalized while its member is the etcd leader", n.name)
			}
			r.reboot(n)
		}
		if restarted != nil {
			if !reflect.DeepEqual(r.record(restarted), restartedRec) || time.Since(restartedAt) > time.Second {
				restarted = nil
				nextKill = time.Now().Add(killDelay(rng))
			}
		}
		// Besides the random kills, each node is killed once in each phase
		// where a crash matters, whatever the timing.
		for _, n := range r.nodes {
			ph := r.record(n).Phase
			if !crash || !slices.Contains(crashPhases, ph) || killedIn[n.name+"/"+string(ph)] {
				continue
			}
			killedIn[n.name+"/"+string(ph)] = true
			kills[ph]++
			nkills++
			r.kill(n)
			r.start(n)
		}
		if crash && restarted == nil && nkills < maxKills && time.Now().After(nextKill) {
			n := r.victim(rng)
			restartedRec = r.record(n)
			kills[restartedRec.Phase]++
			nkills++
			r.kill(n)
			r.start(n)
			restarted, restartedAt = n, time.Now()
		}
		if l := c.LeaderIndex(); l >= 0 && l != leaders[len(leaders)-1] {
			leaders = append(leaders, l)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopWatch()
	<-watched

	for _, n := range r.nodes {
		if b := r.booted(n); b != n.target {
			t.Errorf("%s booted %s, want %s", n.name, b, n.target)
		}
		if st := r.record(n); len(st.Failures) > 0 || st.Queued {
			t.Errorf("%s ended with %+v", n.name, st)
		}
	}
	for _, v := range h.violations {
		t.Errorf("safety: %s", v)
	}
	if len(h.held) != len(r.nodes) {
		// Each node holds for seconds: a watcher that saw less watches
		// nothing.
		t.Errorf("the watcher saw only %v act as slot holders", h.held)
	}
	if len(r.reboots) != 3 {
		t.Errorf("reboots %v, want each node once", r.reboots)
	}
	// Followers first is an ordering, not a safety rule: a follower whose
	// staging fails (as after a kill mid-transaction) withdraws its
	// announcement so the leader does not wait for it, and may then go
	// after the leader. Without crashes the order is exact.
	if want := r.nodes[firstLeader].name; !crash && len(r.reboots) == 3 && r.reboots[2] != want {
		t.Errorf("reboot order %v: the first leader %s did not go last", r.reboots, want)
	}
	if !crash && len(leaders) != 2 {
		t.Errorf("leaders over the rollout: %v, want exactly one change", leaders)
	}
	b, _ := os.ReadFile(r.logFile)
	for _, want := range []string{"moving leadership away", "holding reboot slot", "released reboot slot"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("agents' log never says %q", want)
		}
	}
	if crash && nkills < 5 {
		t.Errorf("only %d kills over the rollout: the test barely crashed anything", nkills)
	}
	phases := slices.Sorted(func(yield func(string) bool) {
		for p, k := range kills {
			if !yield(fmt.Sprintf("%s:%d", p, k)) {
				return
			}
		}
	})
	t.Logf("reboot order %v (first leader %s), leaders %v, %d SIGKILLs by phase %v", r.reboots, r.nodes[firstLeader].name, leaders, nkills, phases)
}

// crashPhases are the phases in which every node is killed once.
var crashPhases = []state.Phase{state.Staging, state.WaitingSlot, state.HoldingSlot, state.Verifying}

// maxKills bounds the crashes of one rollout (each kill mid-staging costs
// the node its staging so far: the next process cancels the transaction).
const maxKills = 12

// killDelay spaces the kills once the last victim made progress: 20-300 ms,
// so they land anywhere in a step.
func killDelay(rng *rand.Rand) time.Duration {
	return 20*time.Millisecond + time.Duration(rng.Int64N(int64(280*time.Millisecond)))
}

// victim picks the node to kill: half the time the one between acquire and
// release (if any), where a crash can do most harm, else any node.
func (r *rollout) victim(rng *rand.Rand) *node {
	if rng.IntN(2) == 0 {
		for _, n := range r.nodes {
			if slices.Contains(holdingPhases, r.record(n).Phase) {
				return n
			}
		}
	}
	return r.nodes[rng.IntN(len(r.nodes))]
}

func holderNames(g lock.GroupStatus) []string {
	var out []string
	for _, e := range g.Holders {
		out = append(out, e.Node)
	}
	return out
}

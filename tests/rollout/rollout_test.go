package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var policy = etcdmember.Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true, MaxLag: 1000}

// TestRollingUpdate runs 20 rollouts of 3 control-plane nodes on one
// cluster, each from a random initial leader. All nodes contend at once,
// each one: announce, wait for its turn by the ordering rules, take the slot,
// move leadership away if it leads, stop its member (the reboot), restart it,
// re-adopt the slot, wait for health, release. Each rollout must change the
// leader exactly once, and the initial leader must reboot last.
func TestRollingUpdate(t *testing.T) {
	// A longer election timeout than the default 100 ms: on a loaded CI
	// machine a heartbeat can be late by that much, and a spurious election
	// would count as a leader change. MoveLeader does not wait for it.
	c := etcdtest.Start(t, etcdtest.Options{TickMs: 20, ElectionMs: 1000})
	start := time.Now()
	for run := 0; run < 20; run++ {
		rollout(t, c, fmt.Sprintf("c%d", run+1))
		if t.Failed() {
			return
		}
	}
	t.Logf("20 rollouts in %v", time.Since(start).Round(time.Millisecond))
}

type world struct {
	t      *testing.T
	c      *etcdtest.Cluster
	target string
	log    *slog.Logger

	mu      sync.Mutex
	updated map[string]bool
	reboots []string
}

func rollout(t *testing.T, c *etcdtest.Cluster, target string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := &world{t: t, c: c, target: target, updated: map[string]bool{},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	// A random initial leader.
	admin := c.Client(t, nil)
	want := rand.IntN(3)
	if lead := c.LeaderIndex(); lead != want && lead >= 0 {
		cl := etcdmember.New(admin, etcdmember.Options{LocalName: c.Members[lead].Name, Log: w.log})
		if _, err := cl.MoveLeaderAway(ctx, func(n string) bool { return n == c.Members[want].Name }); err != nil {
			t.Fatal(err)
		}
	}
	initial := c.LeaderIndex()
	if initial < 0 {
		t.Fatal("no leader before the rollout")
	}
	term := c.Term()
	begin := time.Now()

	// Every node has staged and announced before any decides; the engine
	// announces as soon as it has found the update for this reason.
	var nodes []*node
	for i := range c.Members {
		n := newNode(t, w, i)
		if err := n.lock.Announce(ctx, target); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.update(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", n.name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for _, n := range nodes {
		n.cli.Close()
	}
	for err := range errs {
		t.Error(err)
	}
	changes := c.Term() - term
	t.Logf("%s: initial leader %s, reboots %v, leader changes %d, final leader %s",
		target, c.Members[initial].Name, w.reboots, changes, c.Members[max(c.LeaderIndex(), 0)].Name)
	if changes != 1 {
		t.Errorf("%s: %d leader changes (raft terms), want exactly 1", target, changes)
	}
	t.Logf("%s took %v", target, time.Since(begin).Round(time.Millisecond))
	if len(w.reboots) != 3 || w.reboots[2] != c.Members[initial].Name {
		t.Errorf("%s: reboot order %v; the initial leader %s must go last", target, w.reboots, c.Members[initial].Name)
	}
}

// node is one host's agent, reduced to the coordination steps.
type node struct {
	w     *world
	i     int
	name  string
	cli   *clientv3.Client
	lock  *lock.Lock
	lopts lock.Options
	cl    *etcdmember.Cluster
}

func newNode(t *testing.T, w *world, i int) *node {
	name := w.c.Members[i].Name
	// The local endpoint only, as configured by default: the agent goes
	// down with its member.
	cli := w.c.Client(t, nil, w.c.Members[i].ClientURL)
	o := lock.Options{Prefix: "/update-agent/lock", Group: "control-plane", Slots: 1, TTL: 20 * time.Second,
		Node: name, Member: name, BootID: "boot-1", StateDir: t.TempDir(), Log: w.log}
	l, err := lock.New(cli, o)
	if err != nil {
		t.Fatal(err)
	}
	cl := etcdmember.New(cli, etcdmember.Options{LocalName: name, CallTimeout: 500 * time.Millisecond, Log: w.log})
	return &node{w: w, i: i, name: name, cli: cli, lock: l, lopts: o, cl: cl}
}

func (n *node) situation(ctx context.Context) (etcdmember.Situation, int64, error) {
	h, err := n.cl.Health(ctx)
	if err != nil {
		return etcdmember.Situation{}, 0, err
	}
	pend, rev, err := n.lock.Pending(ctx)
	if err != nil {
		return etcdmember.Situation{}, 0, err
	}
	s := etcdmember.Situation{Local: n.name, Health: h}
	for _, a := range pend {
		if a.Node != n.name && a.Member != "" {
			s.PendingMembers = append(s.PendingMembers, a.Member)
		}
	}
	return s, rev, nil
}

func (n *node) update(ctx context.Context) error {
	// 1. Wait for our turn (followers first), then take the slot.
	for {
		s, rev, err := n.situation(ctx)
		if err != nil {
			return err
		}
		if d := etcdmember.MayAcquire(policy, s); d.Verdict == etcdmember.Proceed {
			break
		}
		if err := n.lock.WaitPendingChange(ctx, rev, 200*time.Millisecond); err != nil {
			return err
		}
	}
	if _, err := n.lock.Acquire(ctx, n.w.target, nil); err != nil {
		return err
	}
	// 2. With the slot: healthy peers, quorum, leadership moved away.
	moveFailures := 0
	for {
		s, _, err := n.situation(ctx)
		if err != nil {
			return err
		}
		d := etcdmember.MayReboot(policy, s)
		if d.Verdict == etcdmember.Proceed {
			break
		}
		if d.Verdict == etcdmember.MoveLeadership {
			// A failed move is retried after the next health check, as the
			// engine does; the leader-change count still has to come out 1.
			if _, err := n.cl.MoveLeaderAway(ctx, n.w.isUpdated); err != nil {
				if moveFailures++; moveFailures > 5 {
					return err
				}
				n.w.t.Logf("%s: moving leadership (will retry): %v", n.name, err)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting to reboot (%s): %w", d.Reason, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// 3. Reboot: the agent stops (keeping the lease), the member goes down
	// and comes back on the new version.
	n.w.mu.Lock()
	n.w.reboots = append(n.w.reboots, n.name)
	n.w.mu.Unlock()
	n.lock.Close()
	n.cli.Close()
	n.w.c.Stop(n.i)
	time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond) // down for a while, peers see it
	if err := n.w.c.Restart(n.i); err != nil {
		return err
	}
	n.w.mu.Lock()
	n.w.updated[n.name] = true
	n.w.mu.Unlock()
	// 4. After boot: a new agent (new client, new Lock on the same state
	// dir) re-adopts the slot, checks health, releases.
	n.cli = n.w.c.Client(n.w.t, nil, n.w.c.Members[n.i].ClientURL)
	n.cl = etcdmember.New(n.cli, etcdmember.Options{LocalName: n.name, CallTimeout: 500 * time.Millisecond, Log: n.w.log})
	l, err := lock.New(n.cli, n.lopts)
	if err != nil {
		return err
	}
	_, pos, found, err := l.Adopt(ctx)
	if err != nil {
		return err
	}
	if !found || !pos.Holder {
		return errors.New("slot not re-adopted after the reboot")
	}
	for {
		h, err := n.cl.Health(ctx)
		if err != nil {
			return err
		}
		healthy := h.LeaderID != 0
		for _, m := range h.Members {
			healthy = healthy && h.Problem(m, policy.MaxLag) == ""
		}
		if healthy {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for health after the reboot: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return l.Release(ctx)
}

func (w *world) isUpdated(member string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.updated[member]
}

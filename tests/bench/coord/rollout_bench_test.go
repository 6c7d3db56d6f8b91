//go:build bench

package coord

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestRollingUpdates: a 3-member etcd and one agent per member roll an update
// through the cluster BENCH_ROLLOUTS times (default 50) per mode, each time
// from a random initial leader and with the agents queueing in random order.
// An agent takes the slot, waits until MayReboot allows, "reboots" its
// member (graceful stop as on SIGTERM, down for a moment, restart) and
// releases once the member serves again. Leader-aware: the etcdmember rules
// (followers first, leadership moved before the leader reboots); unaware:
// same lock and quorum check, no leader rules.
func TestRollingUpdates(t *testing.T) {
	def := 50
	if quick {
		def = 5
	}
	n := envInt("BENCH_ROLLOUTS", def)
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	admin := c.Client(t, nil)
	quiet := slog.New(slog.DiscardHandler)

	type agent struct {
		i    int
		lk   *lock.Lock
		cl   *etcdmember.Cluster
		name string
	}
	var agents []agent
	for i, m := range c.Members {
		cli := c.Client(t, nil)
		lk, err := lock.New(cli, lock.Options{
			Prefix: "/bench", Group: "control-plane", Slots: 1, TTL: 30 * time.Second,
			Node: "node-" + m.Name, Member: m.Name, StateDir: t.TempDir(), Log: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(lk.Close)
		cl := etcdmember.New(cli, etcdmember.Options{LocalName: m.Name, LocalEndpoints: []string{m.ClientURL}, Log: quiet})
		agents = append(agents, agent{i, lk, cl, m.Name})
	}

	modes := []struct {
		name   string
		policy etcdmember.Policy
	}{
		{"leader-aware", etcdmember.Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true, MaxLag: 1000}},
		{"unaware", etcdmember.Policy{RequireQuorum: true, MaxLag: 1000}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var sums []RolloutSummary
	for _, mode := range modes {
		var rs []Rollout
		for k := 0; k < n; k++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			initial := rng.IntN(3)
			if err := moveLeaderTo(ctx, c, admin, initial); err != nil {
				cancel()
				t.Fatalf("%s rollout %d: %v", mode.name, k, err)
			}
			var announced sync.WaitGroup
			announced.Add(len(agents))
			target := fmt.Sprintf("%s-%d", mode.name, k)
			// Random queueing order among the agents.
			jitter := make([]time.Duration, len(agents))
			for j := range jitter {
				jitter[j] = time.Duration(rng.IntN(100)) * time.Millisecond
			}
			r, err := rollout(ctx, c, mode.policy, agents, func(a agent, p etcdmember.Policy) (time.Duration, error) {
				return runAgent(ctx, c, a.i, a.lk, a.cl, a.name, p, target, &announced, jitter[a.i])
			})
			cancel()
			if err != nil {
				t.Fatalf("%s rollout %d: %v", mode.name, k, err)
			}
			r.InitialLeader = initial
			rs = append(rs, r)
		}
		sums = append(sums, Summarize(mode.name, rs))
	}
	writeResult(t, "rollouts.md", fmt.Sprintf("## Rolling updates\n\n3-member etcd (heartbeat 10 ms, election 100 ms, embedded, loopback), 3 agents, %d rollouts per mode from random initial leaders, agents queueing in random order; a reboot is a graceful stop, 200 ms down, restart until the member serves. etcd calls retried after a member went down (as the agent's ports do): %d.\n\n%s\n", n, retries.Load(), RolloutTable(sums)))
	if aware := sums[0]; aware.LeaderChanges.Max > 1 || aware.LeaderNotLast > 0 {
		t.Errorf("leader-aware rollouts: leader changes %v, leader not last %d times", aware.LeaderChanges, aware.LeaderNotLast)
	}
}

// rollout runs one agent per member concurrently and samples the leader.
func rollout[A any](ctx context.Context, c *etcdtest.Cluster, p etcdmember.Policy, agents []A, run func(A, etcdmember.Policy) (time.Duration, error)) (Rollout, error) {
	var (
		mu      sync.Mutex
		order   []int
		samples []int
	)
	term0 := c.Term()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				l := c.LeaderIndex()
				mu.Lock()
				samples = append(samples, l)
				mu.Unlock()
			}
		}
	}()
	start := time.Now()
	missing := make([]time.Duration, len(agents))
	errs := make(chan error, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			down, err := run(a, p)
			mu.Lock()
			order = append(order, i) // one slot: release order is reboot order
			missing[i] = down
			mu.Unlock()
			errs <- err
		}()
	}
	wg.Wait()
	total := time.Since(start)
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		if err != nil {
			return Rollout{}, err
		}
	}
	return Rollout{
		LeaderChanges: LeaderChanges(samples),
		Elections:     c.Term() - term0,
		Missing:       missing,
		Total:         total,
		Order:         order,
	}, nil
}

// retry calls f until it succeeds, as the agent's ports do: a member going
// down cuts the connections of the clients using it.
func retry(ctx context.Context, what string, f func() error) error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = f(); err == nil || ctx.Err() != nil {
			return err
		}
		retries.Add(1)
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s: %w", what, err)
}

var retries atomic.Int64

// runAgent is one node's pass through the reboot part of the flow, with the
// real lock and the real ordering rules.
func runAgent(ctx context.Context, c *etcdtest.Cluster, i int, lk *lock.Lock, cl *etcdmember.Cluster, name string, p etcdmember.Policy, target string, announced *sync.WaitGroup, jitter time.Duration) (time.Duration, error) {
	if err := retry(ctx, "announcing", func() error { return lk.Announce(ctx, target) }); err != nil {
		return 0, err
	}
	// A rollout starts once every node has the update staged and announced.
	announced.Done()
	announced.Wait()
	time.Sleep(jitter)
	for {
		var d etcdmember.Decision
		var rev int64
		err := retry(ctx, "checking the leader rules", func() error {
			h, err := cl.Health(ctx)
			if err != nil {
				return err
			}
			anns, r, err := lk.Pending(ctx)
			if err != nil {
				return err
			}
			var pending []string
			for _, a := range anns {
				if a.Member != name {
					pending = append(pending, a.Member)
				}
			}
			rev = r
			d = etcdmember.MayAcquire(p, etcdmember.Situation{Local: name, Health: h, PendingMembers: pending})
			return nil
		})
		if err != nil {
			return 0, err
		}
		if d.Verdict == etcdmember.Proceed {
			break
		}
		if err := lk.WaitPendingChange(ctx, rev, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
	if err := retry(ctx, "acquiring", func() error { _, err := lk.Acquire(ctx, target, nil); return err }); err != nil {
		return 0, err
	}
	for {
		var d etcdmember.Decision
		err := retry(ctx, "checking health", func() error {
			h, err := cl.Health(ctx)
			d = etcdmember.MayReboot(p, etcdmember.Situation{Local: name, Health: h})
			return err
		})
		if err != nil {
			return 0, err
		}
		if d.Verdict == etcdmember.Proceed {
			break
		}
		if d.Verdict == etcdmember.MoveLeadership {
			if err := retry(ctx, "moving leadership", func() error { _, err := cl.MoveLeaderAway(ctx, nil); return err }); err != nil {
				return 0, err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting to reboot (%s): %w", d.Reason, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	down := time.Now()
	c.Stop(i)
	time.Sleep(200 * time.Millisecond)
	if err := c.Restart(i); err != nil {
		return 0, err
	}
	missing := time.Since(down)
	return missing, retry(ctx, "releasing", func() error { return lk.Release(ctx) })
}

// moveLeaderTo makes member i the leader, as a random starting point.
func moveLeaderTo(ctx context.Context, c *etcdtest.Cluster, admin *clientv3.Client, i int) error {
	for attempt := 0; attempt < 50; attempt++ {
		lead := c.LeaderIndex()
		if lead == i {
			return nil
		}
		if lead >= 0 {
			st, err := admin.Status(ctx, c.Members[i].ClientURL)
			if err != nil {
				return err
			}
			leadCli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Members[lead].ClientURL}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				return err
			}
			_, err = leadCli.MoveLeader(ctx, st.Header.MemberId)
			leadCli.Close()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("could not make member %d the leader", i)
}

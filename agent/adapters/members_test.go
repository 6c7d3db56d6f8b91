package adapters

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// memberHost is one etcd member's host at the engine's unit boundary: a
// fake rpm-ostree whose finalize asks the harness for the reboot.
type memberHost struct {
	mu     sync.Mutex
	booted string
	staged bool
	reboot chan struct{}
}

func (h *memberHost) Status(context.Context) (engine.OSStatus, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := engine.OSStatus{Booted: engine.Deployment{Checksum: h.booted}}
	if h.staged {
		st.Staged = &engine.Deployment{Checksum: "new"}
	}
	return st, nil
}
func (h *memberHost) Check(context.Context) (*state.Target, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.booted == "new" {
		return nil, nil
	}
	return &state.Target{Checksum: "new"}, nil
}
func (h *memberHost) Finalize(context.Context, string) error {
	select {
	case h.reboot <- struct{}{}:
	default:
	}
	return nil
}
func (h *memberHost) Cleanup(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.staged = false
	return nil
}
func (h *memberHost) Stage(context.Context, state.Target) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.staged = true
	return nil
}
func (h *memberHost) Recover(context.Context) error { return nil }

// TestRolloutOneMemberDown: the engines of every member's host, with the
// real lock and cluster adapters, roll an update over a real 3- and
// 5-member cluster whose hosts are split over two groups of 2 slots each:
// the groups alone would let two members through the quorum check at once.
// A host's finalize stops its member, which comes back in a new boot; no
// member ever goes down while another is down, and every host ends on the
// update with its slots released.
func TestRolloutOneMemberDown(t *testing.T) {
	for _, members := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			rolloutOneMemberDown(t, members)
		})
	}
}

func rolloutOneMemberDown(t *testing.T, members int) {
	c := etcdtest.Start(t, etcdtest.Options{Members: members})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	type node struct {
		host     *memberHost
		stateDir string
		boot     int
		eng      *engine.Engine
		lk       *Lock
		stop     context.CancelFunc
		done     chan error
	}
	nodes := make([]*node, members)
	var mu sync.Mutex // guards the nodes' engines (replaced on reboot) and the down count
	start := func(i int) {
		n := nodes[i]
		cli := c.Client(t, nil)
		name := c.Members[i].Name
		lk := &Lock{Node: fmt.Sprintf("n%d", i), Make: func(context.Context) (*lock.Lock, error) {
			return lock.New(cli, lock.Options{Prefix: "/ua", Group: fmt.Sprintf("g%d", i%2), Slots: 2, TTL: 30 * time.Second,
				Node: fmt.Sprintf("n%d", i), Member: name, MachineID: fmt.Sprintf("m%d", i), StateDir: n.stateDir,
				Log: slog.New(slog.DiscardHandler)})
		}}
		m := etcdmember.New(cli, etcdmember.Options{LocalName: name, Log: slog.New(slog.DiscardHandler)})
		cl := Cluster{C: m, Lock: lk, Policy: etcdmember.Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true, MaxLag: m.MaxLag()}}
		boot := fmt.Sprintf("boot-%d-%d", i, n.boot)
		eng := engine.New(engine.Options{OS: n.host, Stager: n.host, Lock: lk, Cluster: cl,
			Store: state.Store{Dir: n.stateDir}, BootID: func() (string, error) { return boot, nil },
			Policy: engine.Policy{CheckInterval: time.Hour, MaxFailures: 3, Retry: engine.Backoff{Base: time.Second, Max: time.Second},
				MoveLeader: true, RequireSafe: true, RecheckInterval: 100 * time.Millisecond, RebootTimeout: time.Minute},
			Log: slog.New(slog.DiscardHandler), BeatInterval: time.Second})
		ectx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- eng.Run(ectx) }()
		mu.Lock()
		n.eng, n.lk, n.stop, n.done = eng, lk, stop, done
		mu.Unlock()
	}
	halt := func(n *node) {
		mu.Lock()
		stop, done, lk := n.stop, n.done, n.lk
		mu.Unlock()
		stop()
		<-done
		lk.Close()
		closed := make(chan error)
		close(closed)
		mu.Lock()
		n.done = closed // halted: a second halt returns at once
		mu.Unlock()
	}
	for i := range nodes {
		nodes[i] = &node{host: &memberHost{booted: "old", reboot: make(chan struct{}, 1)}, stateDir: t.TempDir()}
		start(i)
	}
	defer func() {
		for _, n := range nodes {
			halt(n)
		}
	}()
	down, maxDown := 0, 0
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-n.host.reboot:
			case <-ctx.Done():
				return
			}
			// The host goes down: the agent stops (the lease stays), the
			// member stops; it comes back in a new boot on the update.
			halt(n)
			mu.Lock()
			down++
			maxDown = max(maxDown, down)
			mu.Unlock()
			c.Stop(i)
			time.Sleep(200 * time.Millisecond)
			err := c.Restart(i)
			mu.Lock()
			down--
			mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			n.host.mu.Lock()
			n.host.booted, n.host.staged = "new", false
			n.host.mu.Unlock()
			n.boot++
			start(i)
		}()
	}
	finished := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range nodes {
			s := n.eng.Snapshot()
			if s.State.Phase != state.Idle || s.OS.Booted.Checksum != "new" || s.State.Queued {
				return false
			}
		}
		return true
	}
	for !finished() {
		if ctx.Err() != nil {
			mu.Lock()
			for i, n := range nodes {
				t.Logf("n%d: %+v", i, n.eng.Snapshot())
			}
			mu.Unlock()
			t.Fatal("rollout did not finish")
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if maxDown != 1 {
		t.Errorf("%d members down at once; want 1", maxDown)
	}
}

package cycle

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

// peer is one host of a group, in process: the production engine with the
// real lock, cluster and hook adapters on the test's etcd, its own
// rpm-ostree stand-in, its reboot window a gate.
type peer struct {
	t      *testing.T
	name   string
	env    *standintest.Env
	lk     *adapters.Lock
	win    gate
	logb   testlog.Buffer
	eng    *engine.Engine
	cancel context.CancelFunc
	done   chan error
}

func startPeer(t *testing.T, cli *clientv3.Client, name, member string, hook []string, maxFailures int, retry time.Duration) *peer {
	p := &peer{t: t, name: name, env: standintest.New(t, bin)}
	log := slog.New(slog.NewTextHandler(&p.logb, nil)).With("node", name)
	dir := t.TempDir()
	client := &rpmostree.Client{Path: bin.RpmOstree, Runner: oplog.Runner{Log: log,
		Env: p.env.ClientEnv("update-agent.service"), Interrupt: syscall.SIGINT}}
	p.lk = &adapters.Lock{Node: name, Make: func(ctx context.Context) (*lock.Lock, error) {
		return lock.New(cli, lock.Options{Prefix: prefix, Group: group, Slots: 1, TTL: leaseTTL,
			Node: name, BootID: "boot-1", Member: member, MachineID: "machine-" + name, StateDir: dir, Log: log})
	}}
	hooks := engine.HookRunner{Log: log}
	if hook != nil {
		hooks.Hooks = []engine.Hook{{Name: "1:" + filepath.Base(hook[0]), Argv: hook, Timeout: 30 * time.Second}}
	}
	m := etcdmember.New(cli, etcdmember.Options{LocalName: member, Log: log})
	cl := adapters.Cluster{C: m, Lock: p.lk, Policy: etcdmember.Policy{FollowersFirst: true, MoveLeader: true,
		RequireQuorum: true, MaxLag: m.MaxLag()}}
	p.eng = engine.New(engine.Options{
		OS: adapters.OS{Client: client}, Stager: adapters.PlainStager{Client: client},
		Lock: p.lk, Cluster: cl, Hooks: hooks, Store: state.Store{Dir: dir},
		BootID: func() (string, error) { return "boot-1", nil },
		Policy: engine.Policy{CheckInterval: 200 * time.Millisecond, Retry: engine.Backoff{Base: retry, Max: retry},
			MaxFailures: maxFailures, Window: &p.win, MoveLeader: true, RequireSafe: true,
			RecheckInterval: 200 * time.Millisecond, RebootTimeout: time.Minute},
		Log: log, BeatInterval: time.Second,
	})
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	p.done = make(chan error, 1)
	go func() { p.done <- p.eng.Run(ctx) }()
	t.Cleanup(func() {
		p.cancel()
		if err := <-p.done; err != nil {
			t.Error(err)
		}
		p.lk.Close()
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.logb.String())
		}
	})
	return p
}

func (p *peer) open(o bool) {
	p.win.mu.Lock()
	p.win.open = o
	p.win.mu.Unlock()
}

func (p *peer) wait(what string, cond func(engine.Snapshot) bool) {
	p.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond(p.eng.Snapshot()) {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: timed out waiting for %s: %+v", p.name, what, p.eng.Snapshot())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// announced says whether etcd holds an announcement of node's pending update.
func (p *peer) announced(ctx context.Context, node string) bool {
	p.t.Helper()
	l, err := p.lk.Get(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	anns, _, err := l.Pending(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	for _, a := range anns {
		if a.Node == node {
			return true
		}
	}
	return false
}

// TestFailedFollowerWithdrawsItsAnnouncement (issue 14 item 6): a follower
// whose pre-reboot hook fails withdraws its pending-update announcement in
// etcd during the backoff and once the target is set aside after
// updates.max_attempts failures; the leader, which with followers_first
// waited for it, then goes.
func TestFailedFollowerWithdrawsItsAnnouncement(t *testing.T) {
	t.Parallel()
	// Slow elections: a leader change under a loaded machine would let the
	// leader go for the wrong reason.
	c := etcdtest.Start(t, etcdtest.Options{TickMs: 50, ElectionMs: 1000})
	cli := c.Client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	li := c.LeaderIndex()
	fi := (li + 1) % len(c.Members)
	leaderMember, followerMember := c.Members[li].Name, c.Members[fi].Name

	runs := filepath.Join(t.TempDir(), "hook-runs")
	hook := filepath.Join(t.TempDir(), "drain")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho run >> "+runs+"\necho cannot evict pod >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const maxAttempts = 2
	f := startPeer(t, cli, "follower", followerMember, []string{hook}, maxAttempts, 5*time.Second)
	target := f.env.Publish(f.env.Ref, 1)
	f.wait("the follower staged, its window closed", func(s engine.Snapshot) bool {
		return s.State.Phase == state.Staged && s.State.Locked == target
	})
	if !f.announced(ctx, "follower") {
		t.Fatal("the follower did not announce its pending update")
	}

	l := startPeer(t, cli, "leader", leaderMember, nil, maxAttempts, 5*time.Second)
	l.env.Publish(l.env.Ref, 1)
	l.open(true)
	l.wait("the leader waiting for the follower", func(s engine.Snapshot) bool {
		return s.State.Phase == state.Staged && strings.Contains(s.Action.Reason,
			fmt.Sprintf("local member %s is the leader; it updates after %s", leaderMember, followerMember))
	})
	// The leader waits for its window from here, so that the follower's
	// retry is not held up by the leader holding the slot.
	l.open(false)

	f.open(true)
	f.wait("the follower's first failure, in backoff", func(s engine.Snapshot) bool {
		fl := s.State.Failures[target]
		return fl.Count == 1 && s.State.Phase == state.Staged && !s.State.Queued
	})
	if f.announced(ctx, "follower") {
		t.Error("the follower kept its announcement during the backoff after a failed hook")
	}
	f.wait("the target set aside", func(s engine.Snapshot) bool {
		fl := s.State.Failures[target]
		return fl.SetAside && s.State.Phase == state.Idle && s.OS.Staged == nil
	})
	if f.announced(ctx, "follower") {
		t.Error("the follower kept its announcement after the target was set aside")
	}
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != maxAttempts {
		t.Errorf("hook ran %d times, want %d (updates.max_attempts)", strings.Count(string(b), "run"), maxAttempts)
	}

	l.open(true)
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if !standintest.WaitFor(wctx, l.env.Rebooted) {
		t.Fatalf("the leader did not finalize once the follower withdrew: %+v", l.eng.Snapshot())
	}
	if !strings.Contains(l.logb.String(), "local member is the etcd leader: moving leadership away") {
		t.Error("the leader went without being the leader: the test proves nothing")
	}
	if f.env.Rebooted() {
		t.Error("the follower finalized although its hook failed")
	}
}

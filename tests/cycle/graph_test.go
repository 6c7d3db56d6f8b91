package cycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/graph"
	gt "github.com/update-agent/update-agent/agent/graph/graphtest"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// graphSolo is a solo agent whose updates come from an update graph
// (updates.source = "graph"): the real graph source and adapters over the
// stand-in, the graph served by graphtest as Fedora's server builds it.
type graphSolo struct {
	*solo
	srv  *gt.Server
	src  *graph.Source
	motd string
	// recheck is the daemon's Policy.RecheckStaged for the graph source.
	recheck bool
	// rpmOstree, when set, is the rpm-ostree the agent runs (a wrapper
	// of the stand-in).
	rpmOstree string
}

func newGraphSolo(t *testing.T) *graphSolo {
	g := &graphSolo{solo: newSolo(t), srv: gt.New(), recheck: true}
	t.Cleanup(g.srv.Close)
	g.motd = filepath.Join(t.TempDir(), "motd.d", "85-update-agent-deadend")
	g.src = &graph.Source{Client: &graph.Client{BaseURL: g.srv.URL},
		Identity: graph.Identity{Stream: "stable", Group: "default", Wariness: 0.5},
		Notice:   graph.MOTD{File: g.motd}, Log: g.log}
	return g
}

func (g *graphSolo) start() {
	a := g.solo
	path := bin.RpmOstree
	if g.rpmOstree != "" {
		path = g.rpmOstree
	}
	client := &rpmostree.Client{Path: path, Runner: oplog.Runner{Log: a.log,
		Env: a.env.ClientEnv("update-agent.service"), Interrupt: syscall.SIGINT}}
	b := a.boot
	a.eng = engine.New(engine.Options{OS: adapters.OS{Client: client, Graph: g.src}, Stager: adapters.PlainStager{Client: client, Exact: true, Override: g.src.Override},
		Store: state.Store{Dir: a.dir}, BootID: func() (string, error) { return b, nil }, Log: a.log,
		Policy: engine.Policy{CheckInterval: 200 * time.Millisecond, Retry: engine.Backoff{Base: 200 * time.Millisecond, Max: 200 * time.Millisecond},
			MaxFailures: 3, Window: &a.win, RecheckInterval: 200 * time.Millisecond, RebootTimeout: time.Minute, RecheckStaged: g.recheck}})
	var ctx context.Context
	ctx, a.cancel = context.WithCancel(context.Background())
	a.done = make(chan error, 1)
	go func() { a.done <- a.eng.Run(ctx) }()
}

// rebootInto opens the window, waits for the finalize and boots target.
func (g *graphSolo) rebootInto(target string) {
	g.t.Helper()
	a := g.solo
	g.setWindow(true)
	a.wait("the reboot into "+target, func(engine.Snapshot) bool { return a.env.Rebooted() })
	a.stop()
	a.env.PlannedReboot()
	g.setWindow(false)
	a.boot += "+"
	g.start()
	a.wait("booted "+target, func(s engine.Snapshot) bool { return s.OS.Booted.Checksum == target })
}

func (g *graphSolo) setWindow(open bool) {
	g.win.mu.Lock()
	g.win.open = open
	g.win.mu.Unlock()
}

// idleNoUpdate waits until the engine, after n more checks, waits with
// nothing staged and "no update".
func (g *graphSolo) idleNoUpdate(n int) {
	g.t.Helper()
	g.waitChecks(n)
	g.wait("idle, no update", func(s engine.Snapshot) bool {
		return s.Action.Kind == engine.ActWait && strings.Contains(s.Action.Reason, "no update available")
	})
	if s := g.eng.Snapshot(); s.OS.Staged != nil || s.State.Phase != state.Idle {
		g.t.Fatalf("staged: %+v", s)
	}
}

// waitChecks waits until the server has answered n more checks.
func (g *graphSolo) waitChecks(n int) {
	g.t.Helper()
	from := len(g.srv.Queries())
	g.wait("graph checks", func(engine.Snapshot) bool { return len(g.srv.Queries()) >= from+n })
}

func booted(t *testing.T, a *solo) string {
	out, _, _ := a.env.CLI("", "status", "--json")
	st, err := rpmostree.ParseStatus([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := st.Booted()
	return b.Checksum
}

// TestGraphBarrierFirst: with the ref already at 40.3, a node on 40.1 stages
// and boots the barrier 40.2 first (the only edge out of 40.1), then 40.3;
// the staged release is replaced when the graph offers a newer one.
func TestGraphBarrierFirst(t *testing.T) {
	t.Parallel()
	g := newGraphSolo(t)
	a := g.solo
	base := booted(t, a)
	time.Sleep(1100 * time.Millisecond) // commit timestamps are seconds
	barrier := a.env.Publish(a.env.Ref, 1)
	time.Sleep(1100 * time.Millisecond)
	last := a.env.Publish(a.env.Ref, 2)
	time.Sleep(1100 * time.Millisecond)
	newest := a.env.Publish(a.env.Ref, 3) // the ref's tip: what `upgrade` would stage
	r0 := gt.Release{Version: "40.1", Checksum: base, Rollout: gt.Done}
	rb := gt.Release{Version: "40.2", Checksum: barrier, Barrier: true, Rollout: gt.Done}
	r3 := gt.Release{Version: "40.3", Checksum: last, Rollout: gt.Done}
	g.srv.Set(r0, rb, r3)
	g.start()
	a.waitStaged(barrier)
	g.waitChecks(3) // checks go on while it waits for the window
	if s := a.eng.Snapshot(); s.OS.Staged.Checksum != barrier {
		t.Fatalf("staged %s, want the barrier %s", s.OS.Staged.Checksum, barrier)
	}
	g.rebootInto(barrier)
	a.waitStaged(last)
	// 40.4 comes out while 40.3 waits for the window: it replaces 40.3,
	// so the node reboots once, into 40.4 (zincati#928).
	g.srv.Set(r0, rb, r3, gt.Release{Version: "40.4", Checksum: newest, Rollout: gt.Done})
	a.waitStaged(newest)
	if !strings.Contains(a.logb.String(), "update "+newest+" is now offered and replaces staged "+last) {
		t.Error("the agent did not say why it stages again")
	}
	g.rebootInto(newest)
	for _, q := range g.srv.Queries() {
		if q.Get("stream") != "stable" || q.Get("rollout_wariness") != "0.500000" || q.Get("os_checksum") == "" {
			t.Fatalf("query %v", q)
		}
	}
}

// TestGraphDeadEnd: a node on a dead end stages nothing, though the ref has
// moved on and the graph lists a newer release (it offers no edge to it);
// the motd says so, and the graph's report says why.
func TestGraphDeadEnd(t *testing.T) {
	t.Parallel()
	g := newGraphSolo(t)
	a := g.solo
	base := booted(t, a)
	time.Sleep(1100 * time.Millisecond)
	next := a.env.Publish(a.env.Ref, 1)
	g.srv.Set(gt.Release{Version: "40.1", Checksum: base, DeadEnd: "etcd's WAL breaks on 40.1", Rollout: gt.Done},
		gt.Release{Version: "40.2", Checksum: next, Rollout: gt.Done})
	g.setWindow(true)
	g.start()
	g.idleNoUpdate(5)
	if r := g.src.Last(); r == nil || !r.DeadEnd || !strings.Contains(r.Why, "dead end (etcd's WAL breaks on 40.1)") {
		t.Fatalf("report %+v", r)
	}
	if b, err := os.ReadFile(g.motd); err != nil || !strings.Contains(string(b), "dead-end release") || !strings.Contains(string(b), "etcd's WAL breaks") {
		t.Fatalf("motd %q, %v", b, err)
	}
	// The graph lifts the dead end (an edge to 40.2): the notice goes, and
	// the node updates.
	g.srv.Set(gt.Release{Version: "40.1", Checksum: base, Rollout: gt.Done}, gt.Release{Version: "40.2", Checksum: next, Rollout: gt.Done})
	g.rebootInto(next)
	if _, err := os.Stat(g.motd); !os.IsNotExist(err) {
		t.Errorf("the dead-end notice stayed: %v", err)
	}
}

// TestGraphUnreachable: an unreachable graph is a wait with the reason,
// never "no update"; a rollout this node's wariness has not reached is not
// staged, and is once the rollout reaches it.
func TestGraphUnreachableAndRollout(t *testing.T) {
	t.Parallel()
	g := newGraphSolo(t)
	a := g.solo
	base := booted(t, a)
	time.Sleep(1100 * time.Millisecond)
	next := a.env.Publish(a.env.Ref, 1)
	url := g.srv.URL
	g.srv.Close()
	g.start()
	a.wait("the unreachable graph as the wait reason", func(s engine.Snapshot) bool {
		return s.Action.Kind == engine.ActWait && strings.Contains(s.Action.Reason, "update graph unreachable") &&
			strings.Contains(s.State.LastError, url)
	})
	a.stop()
	g.srv = gt.New()
	t.Cleanup(g.srv.Close)
	g.src.Client.BaseURL = g.srv.URL
	now := time.Now()
	rollout := &gt.Rollout{StartEpoch: now.Unix(), StartValue: 0.2} // no progress past 20%: wariness 0.5 waits
	g.srv.Set(gt.Release{Version: "40.1", Checksum: base, Rollout: gt.Done}, gt.Release{Version: "40.2", Checksum: next, Rollout: rollout})
	g.setWindow(true)
	g.start()
	g.idleNoUpdate(5)
	if r := g.src.Last(); r.Offered != 0 || !strings.Contains(r.Why, "newest the update graph offers") {
		t.Fatalf("report %+v", r)
	}
	g.setWindow(false)
	// The rollout reaches wariness 0.5.
	g.srv.Set(gt.Release{Version: "40.1", Checksum: base, Rollout: gt.Done},
		gt.Release{Version: "40.2", Checksum: next, Rollout: &gt.Rollout{StartEpoch: now.Unix(), StartValue: 0.6}})
	a.waitStaged(next)
}

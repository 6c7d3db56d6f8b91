// Package cycle runs the whole update flow without a VM: three agents'
// engines with the real adapters, each in a process of its own (so a crash
// is a real SIGKILL), each host an rpm-ostree stand-in doing real ostree
// I/O (its reboot command a test hook), coordinated through a real embedded
// 3-member etcd cluster whose members go down and up with their hosts.
// Staging runs the CLI directly (no systemd here); the gentle staging is
// tested in the guest.
package cycle

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
	"github.com/update-agent/update-agent/tests/testlog"
)

var bin standintest.Binaries

func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeEnv); spec != "" {
		os.Exit(runNode(spec))
	}
	standintest.Main(m, &bin)
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
	// gates, when set, are the engine's reboot gates.
	gates engine.Gates
	// backend, when set, replaces the rpm-ostree adapters (bootc_test.go).
	backend func() (engine.OS, engine.Stager)

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
	var os_ engine.OS = adapters.OS{Client: client}
	var stager engine.Stager = adapters.PlainStager{Client: client}
	if a.backend != nil {
		os_, stager = a.backend()
	}
	a.eng = engine.New(engine.Options{OS: os_, Stager: stager,
		Store: state.Store{Dir: a.dir}, BootID: func() (string, error) { return b, nil }, Log: a.log, Gates: a.gates,
		Policy: engine.Policy{CheckInterval: 200 * time.Millisecond, Retry: engine.Backoff{Base: time.Second, Max: time.Second},
			MaxFailures: 3, Window: &a.win, RecheckInterval: 200 * time.Millisecond, RebootTimeout: time.Minute,
			WatchStaged: 200 * time.Millisecond}})
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

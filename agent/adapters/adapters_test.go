package adapters

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/rpmostree/standin"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

var bin standintest.Binaries

func TestMain(m *testing.M) { standintest.Main(m, &bin) }

func host(t *testing.T) (*standintest.Env, OS, PlainStager) {
	env := standintest.New(t, bin)
	c := &rpmostree.Client{Path: bin.RpmOstree, Runner: oplog.Runner{Env: env.ClientEnv("update-agent.service"), Interrupt: syscall.SIGINT}}
	return env, OS{Client: c}, PlainStager{Client: c}
}

// The engine's view of rpm-ostree through the adapter: check, stage (the
// staged deployment is the checked target), the finalize refusals as the
// engine's errors, cleanup, and a finalize that reboots.
func TestOSAdapter(t *testing.T) {
	ctx := context.Background()
	env, os, stager := host(t)
	if tg, err := os.Check(ctx); err != nil || tg != nil {
		t.Fatalf("check with nothing published: %v, %v", tg, err)
	}
	want := env.Publish(env.Ref, 1)
	tg, err := os.Check(ctx)
	if err != nil || tg == nil || tg.Checksum != want {
		t.Fatalf("check: %+v, %v; want %s", tg, err, want)
	}
	if err := os.Finalize(ctx, want); !errors.Is(err, engine.ErrNoStagedDeployment) {
		t.Errorf("finalize with nothing staged: %v", err)
	}
	if err := stager.Stage(ctx, *tg); err != nil {
		t.Fatal(err)
	}
	st, err := os.Status(ctx)
	if err != nil || st.Staged == nil || st.Staged.Checksum != want || st.Booted.Checksum == want {
		t.Fatalf("status after staging: %+v, %v", st, err)
	}
	// Staging again finds nothing new and must say so: it did not lock.
	if err := stager.Stage(ctx, *tg); err == nil {
		t.Error("staging an already staged target reported success")
	}
	if err := os.Finalize(ctx, "0000"); err == nil || errors.Is(err, engine.ErrNoStagedDeployment) || errors.Is(err, engine.ErrInhibited) {
		t.Errorf("finalize of another checksum: %v, want an error the engine treats as possibly unlocked", err)
	}
	env.SetInhibitors([]standin.Inhibitor{{What: "shutdown", Who: "test", Why: "holding", Mode: "block"}})
	if err := os.Finalize(ctx, want); !errors.Is(err, engine.ErrInhibited) {
		t.Errorf("finalize under an inhibitor: %v", err)
	}
	env.SetInhibitors(nil)
	// An unlocked staged deployment (staged by someone else): finalize
	// refuses it as already unlocked.
	if err := os.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, serr, code := env.CLI("", "deploy", "revision="+want); code != 0 {
		t.Fatalf("deploy without lock: %d %s", code, serr)
	}
	if err := os.Finalize(ctx, want); !errors.Is(err, rpmostree.ErrAlreadyUnlocked) || errors.Is(err, engine.ErrInhibited) {
		t.Errorf("finalize of an unlocked deployment: %v", err)
	}
	if err := os.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Status(ctx); st.Staged != nil {
		t.Errorf("staged after cleanup: %+v", st.Staged)
	}
	if err := stager.Stage(ctx, *tg); err != nil {
		t.Fatal(err)
	}
	if err := os.Finalize(ctx, want); err != nil {
		t.Fatal(err)
	}
	// The daemon runs the reboot command once the transaction is over.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if !standintest.WaitFor(wctx, env.Rebooted) {
		t.Error("finalize did not run the reboot command")
	}
	// A process that died before recording its finalize tries again: the
	// reboot is already under way, which is what it wanted.
	if err := os.Finalize(ctx, want); err != nil {
		t.Errorf("finalize while the reboot is under way: %v", err)
	}
}

func TestRequest(t *testing.T) {
	tg := state.Target{Checksum: "abc"}
	if r := Request(rpmostree.Deployment{Origin: "fedora:os/stable"}, "", tg); r.Kind != rpmostree.StageDeploy || r.Checksum != "abc" {
		t.Errorf("ostree origin: %+v", r)
	}
	if r := Request(rpmostree.Deployment{ContainerImageReference: "ostree-unverified-registry:x/y:z"}, "", tg); r.Kind != rpmostree.StageUpgrade {
		t.Errorf("container origin: %+v", r)
	}
	if r := Request(rpmostree.Deployment{}, "ostree-unverified-registry:x/y:z", tg); r.Kind != rpmostree.StageRebase || r.Ref == "" {
		t.Errorf("image source: %+v", r)
	}
}

func TestRebaseTarget(t *testing.T) {
	const img = "ostree-unverified-registry:registry.example/example/os:stable"
	dep := func(ref, digest string, booted, staged bool) rpmostree.Deployment {
		d := rpmostree.Deployment{Checksum: "c-" + digest, Booted: booted, Staged: staged, Version: "v-" + digest}
		if ref != "" {
			d.ContainerImageReference, d.ContainerImageReferenceDigest = ref, digest
		} else {
			d.Origin = "fedora:os/stable"
		}
		return d
	}
	for _, c := range []struct {
		name string
		deps []rpmostree.Deployment
		want *state.Target // nil: ask upgrade --check
	}{
		{"booted from the image: upgrade --check knows", []rpmostree.Deployment{dep(img, "sha256:b", true, false)}, nil},
		{"booted from an ostree origin: rebase", []rpmostree.Deployment{dep("", "", true, false)}, &state.Target{Checksum: img, Version: "rebase"}},
		{"booted from another image: rebase", []rpmostree.Deployment{dep("ostree-unverified-registry:registry.example/example/os:old", "sha256:o", true, false)},
			&state.Target{Checksum: img, Version: "rebase"}},
		{"rebase staged: that is the target, not the old origin's update",
			[]rpmostree.Deployment{dep(img, "sha256:n", false, true), dep("", "", true, false)}, &state.Target{Checksum: "sha256:n", Version: "v-sha256:n"}},
		{"something else staged: rebase", []rpmostree.Deployment{dep("", "", false, true), dep("", "", true, false)}, &state.Target{Checksum: img, Version: "rebase"}},
		{"no booted deployment: upgrade --check says so", []rpmostree.Deployment{dep("", "", false, false)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := rebaseTarget(&rpmostree.Status{Deployments: c.deps}, img)
			if ok != (c.want != nil) || (ok && *got != *c.want) {
				t.Errorf("rebaseTarget = %+v, %v; want %+v", got, ok, c.want)
			}
		})
	}
}

// updates.allow_downgrade reaches rpm-ostree: an older target is refused
// unless it is set.
func TestStagerDowngrade(t *testing.T) {
	ctx := context.Background()
	env, os, stager := host(t)
	st, err := os.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := state.Target{Checksum: st.Booted.Checksum}
	time.Sleep(1100 * time.Millisecond) // commit timestamps have whole seconds
	tg, err := os.Check(ctx)
	if err == nil && tg == nil {
		env.Publish(env.Ref, 1)
		tg, err = os.Check(ctx)
	}
	if err != nil || tg == nil {
		t.Fatalf("check: %+v, %v", tg, err)
	}
	if err := stager.Stage(ctx, *tg); err != nil {
		t.Fatal(err)
	}
	if err := stager.Stage(ctx, old); err == nil {
		t.Fatal("staging an older target succeeded without allow_downgrade")
	}
	stager.AllowDowngrade = true
	if err := stager.Stage(ctx, old); err != nil {
		t.Fatalf("staging an older target with allow_downgrade: %v", err)
	}
}

// TestLastErrorOnce: a poll repeating one failure reports it once, a new one
// again, and a success resets it.
func TestLastErrorOnce(t *testing.T) {
	var l LastError
	e1, e2 := errors.New("one"), errors.New("two")
	for i, c := range []struct {
		err  error
		want bool
	}{{e1, true}, {e1, false}, {e2, true}, {nil, true}, {e2, true}, {e2, false}} {
		if got := l.Changed(c.err); got != c.want {
			t.Errorf("step %d (%v): Changed = %v, want %v", i, c.err, got, c.want)
		}
	}
}

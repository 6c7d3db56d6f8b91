package adapters

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/agent/systemd"
)

// failingUnit is systemd at the stager's boundary: the staging unit starts
// and exits with status 1.
type failingUnit struct{}

func (failingUnit) StartTransient(context.Context, systemd.TransientService) error { return nil }
func (failingUnit) Wait(_ context.Context, unit string) (systemd.UnitStatus, error) {
	return systemd.UnitStatus{Name: unit, Result: "exit-code", ExecMainCode: 1, ExecMainStatus: 1}, nil
}
func (failingUnit) Status(_ context.Context, unit string) (systemd.UnitStatus, error) {
	return systemd.UnitStatus{Name: unit, LoadState: "not-found"}, nil
}
func (failingUnit) Brief(context.Context, string) (systemd.Brief, error) {
	return systemd.Brief{ActiveState: "inactive"}, nil
}
func (failingUnit) ControlGroup(context.Context, string) (string, error) { return "", nil }
func (failingUnit) Stop(context.Context, string) error                   { return nil }
func (failingUnit) Restart(context.Context, string) error                { return nil }
func (failingUnit) ResetFailed(context.Context, string) error            { return nil }
func (failingUnit) Reload(context.Context) error                         { return nil }
func (failingUnit) Save(context.Context, string, ...string) ([]systemd.SavedProp, error) {
	return nil, nil
}
func (failingUnit) SetRuntime(context.Context, string, ...sd.Property) error { return nil }
func (failingUnit) Freeze(context.Context, string) error                     { return nil }
func (failingUnit) Thaw(context.Context, string) error                       { return nil }

// recorded is what the engine records for a failed step's error: the
// failure's text, as status and the journal show it.
func recorded(t *testing.T, phase state.Phase, ev engine.Event, os engine.OSStatus) string {
	t.Helper()
	st := state.State{Version: 1, Phase: phase, Target: state.Target{Checksum: "new"}, Locked: "new", Queued: true, HooksRan: true}
	next, _ := engine.Decide(st, ev, engine.Obs{OS: os, Recovered: true}, engine.Policy{MaxFailures: 3}, time.Now())
	if f, ok := next.Failures["new"]; ok {
		return f.LastError
	}
	return next.LastError
}

// A failed staging says "staging" once: agent/stage says it, the adapter
// and the engine add nothing (it read "stage: staging <sum>: staging: ...").
func TestStagingFailureSaysStagingOnce(t *testing.T) {
	env, os_, _ := host(t)
	target := env.Publish(env.Ref, 1)
	dir := t.TempDir()
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Stager{Client: os_.Client, Make: func(context.Context) (*stage.Stager, error) {
		return stage.New(stage.Options{StateDir: filepath.Join(dir, "state"), BootIDPath: bootID, RuntimeUnitDir: filepath.Join(dir, "run"),
			RuntimeControlDir: filepath.Join(dir, "control")},
			stage.Deps{Systemd: failingUnit{}, Runner: oplog.Runner{}})
	}}
	err := s.Stage(context.Background(), state.Target{Checksum: target})
	const want = "staging: update-agent-staging.service: result exit-code, exit status 1 (see journalctl -u update-agent-staging.service)"
	if err == nil || err.Error() != want {
		t.Fatalf("staging error\n got %v\nwant %s", err, want)
	}
	if got := recorded(t, state.Staging, engine.StageDone{Err: err}, engine.OSStatus{Booted: engine.Deployment{Checksum: "old"}}); got != want {
		t.Errorf("recorded failure\n got %s\nwant %s", got, want)
	}
	if r := s.LastStaging(); r == nil || r.OK || r.Error != want {
		t.Errorf("last staging report %+v", r)
	}
}

// A finalize refused by rpm-ostree for want of a staged deployment says so
// once, in rpm-ostree's words (it repeated "no pending staged deployment"
// twice before them), and the engine still tells the refusal apart.
func TestFinalizeRefusalSaysItOnce(t *testing.T) {
	env, os_, _ := host(t)
	sum := env.Publish(env.Ref, 1)
	// Not through OS.Finalize, which looks at the status first: rpm-ostree
	// itself refuses, as when the staged deployment vanished in between.
	err := mapFinalize(os_.Client.Finalize(context.Background(), rpmostree.Deployment{Checksum: sum}))
	want := "finalizing deployment " + sum + ": running " + bin.RpmOstree + " finalize-deployment " + sum +
		": exit status 1: error: No pending staged deployment found"
	if err == nil || err.Error() != want {
		t.Fatalf("finalize error\n got %v\nwant %s", err, want)
	}
	if n := strings.Count(strings.ToLower(err.Error()), "no pending staged deployment"); n != 1 {
		t.Errorf("the refusal is said %d times", n)
	}
	staged := engine.OSStatus{Booted: engine.Deployment{Checksum: "old"}, Staged: &engine.Deployment{Checksum: "new"}}
	if got := recorded(t, state.Finalizing, engine.FinalizeDone{Err: err}, staged); got != want {
		t.Errorf("recorded\n got %s\nwant %s", got, want)
	}
	// Status shows nothing staged: the adapter says it, once.
	if err := os_.Finalize(context.Background(), sum); err == nil || err.Error() != "finalizing "+sum+": no pending staged deployment" {
		t.Errorf("finalize with nothing staged: %v", err)
	}
}

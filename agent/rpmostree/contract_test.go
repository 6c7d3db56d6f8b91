package rpmostree_test

// Contract tests: the client against the rpm-ostree stand-in (daemon as a
// child process, temporary sysroot, real ostree I/O).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/tests/rpmostree/standin"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

var bins standintest.Binaries

func TestMain(m *testing.M) { standintest.Main(m, &bins) }

const agentUnit = "update-agent.service"

func client(e *standintest.Env, unit string) *rpmostree.Client {
	return &rpmostree.Client{
		Path:   e.Bin.RpmOstree,
		Runner: oplog.Runner{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Env: e.ClientEnv(unit)},
	}
}

func status(t *testing.T, c *rpmostree.Client) *rpmostree.Status {
	t.Helper()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustStaged(t *testing.T, c *rpmostree.Client) rpmostree.Deployment {
	t.Helper()
	d, ok := status(t, c).Staged()
	if !ok {
		t.Fatal("nothing staged")
	}
	return d
}

func TestStatusCheckStageFinalizeReboot(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e, agentUnit)
	ctx := context.Background()

	st := status(t, c)
	booted, ok := st.Booted()
	if !ok || len(st.Deployments) != 1 || booted.Origin != "fedora:os/stable" || booted.Version != "1.0" {
		t.Fatalf("fresh status = %+v", st)
	}
	if booted.ID != fmt.Sprintf("fedora-coreos-%s.0", booted.Checksum) || st.Transaction != nil || st.UpdateDriver != nil {
		t.Errorf("booted = %+v, transaction %v, driver %v", booted, st.Transaction, st.UpdateDriver)
	}
	// No update: exit 77 and "No updates available.".
	if r, err := c.Check(ctx); err != nil || r.Available {
		t.Fatalf("Check with nothing new = %+v, %v", r, err)
	}
	out, _, code := e.CLI(agentUnit, "upgrade", "--check")
	if code != 77 || !strings.Contains(out, "No updates available.") {
		t.Errorf("upgrade --check: exit %d, %q", code, out)
	}

	next := e.Publish(e.Ref, 1)
	r, err := c.Check(ctx)
	if err != nil || !r.Available || r.Commit != next || r.Version != "1.1" {
		t.Fatalf("Check = %+v, %v; want %s 1.1", r, err, next)
	}
	res, err := c.Stage(ctx, rpmostree.StageRequest{})
	if err != nil || !res.Changed {
		t.Fatalf("Stage = %+v, %v", res, err)
	}
	staged := mustStaged(t, c)
	if staged.Checksum != next || staged.Booted || staged.Version != "1.1" {
		t.Errorf("staged = %+v", staged)
	}
	// Upstream sets "finalization-locked" on the staged deployment iff
	// the legacy lock file exists (coreos/rpm-ostree rust/src/daemon.rs),
	// which the stand-in's lock stands for; Stage locks.
	if staged.FinalizationLocked == nil || !*staged.FinalizationLocked {
		t.Errorf("locked staged deployment: finalization-locked = %v, want true", staged.FinalizationLocked)
	}
	// Real I/O: the tree was pulled and checked out.
	files, _ := filepath.Glob(filepath.Join(e.Sysroot, "ostree/deploy/fedora-coreos/deploy", next+".0", "usr/share/mkupdate/*/*.bin"))
	if len(files) != 60 {
		t.Errorf("staged checkout has %d files, want 60", len(files))
	}
	// (-b keeps cached-update, which names next: only deployments count.)
	out, _, _ = e.CLI(agentUnit, "status", "--json", "-b")
	if st, err := rpmostree.ParseStatus([]byte(out)); err != nil || len(st.Deployments) != 1 || st.Deployments[0].Checksum != booted.Checksum {
		t.Errorf("status --json -b shows more than the booted deployment (%v):\n%s", err, out)
	}
	if l := e.DaemonLog(); !strings.Contains(l, "Initiated txn Upgrade for client(id:update-agent ") {
		t.Errorf("daemon log does not name the client id:\n%s", l)
	}
	// Staging the same target again changes nothing: exit 77.
	if res, err := c.Stage(ctx, rpmostree.StageRequest{}); err != nil || res.Changed {
		t.Errorf("second Stage = %+v, %v; want unchanged", res, err)
	}
	// An orderly reboot does not apply a locked deployment.
	if out := e.PlannedReboot(); !strings.Contains(out, "Not finalizing; deployment is locked for finalization") {
		t.Errorf("shutdown hook said %q", out)
	}
	if b, _ := status(t, c).Booted(); b.Checksum != booted.Checksum {
		t.Fatalf("locked deployment was applied by a reboot: booted %s", b.Checksum)
	}
	// Stage again (lost with /run), finalize: unlock + reboot into it.
	if _, err := c.Stage(ctx, rpmostree.StageRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Finalize(ctx, mustStaged(t, c)); err != nil {
		t.Fatal(err)
	}
	if !standintest.WaitFor(timeout(t, 5*time.Second), e.Rebooted) {
		t.Fatal("finalize-deployment did not run the reboot command")
	}
	// Unlocked by finalize-deployment: the key is gone, not false.
	if s := mustStaged(t, c); s.FinalizationLocked != nil {
		t.Errorf("unlocked staged deployment: finalization-locked = %v, want absent", *s.FinalizationLocked)
	}
	e.PlannedReboot()
	st = status(t, c)
	b, _ := st.Booted()
	if b.Checksum != next || len(st.Deployments) != 2 || st.Deployments[1].Checksum != booted.Checksum {
		t.Errorf("after reboot: %+v", st.Deployments)
	}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The trap: staging a target that is already staged (unlocked) prints
// "No change." and does not lock it; the agent must detect that and clean up.
func TestNoReLockTrap(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e, agentUnit)
	ctx := context.Background()
	next := e.Publish(e.Ref, 1)
	// Someone stages it without --lock-finalization.
	if out, stderr, code := e.CLI("sshd.service", "deploy", "revision="+next); code != 0 {
		t.Fatalf("deploy: exit %d %s %s", code, out, stderr)
	}
	res, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: next})
	if err != nil || res.Changed {
		t.Fatalf("Stage of the staged target = %+v, %v; want unchanged", res, err)
	}
	out, _, _ := e.CLI(agentUnit, "deploy", "--lock-finalization", "revision="+next)
	if !strings.Contains(out, "No change.") {
		t.Errorf("deploy output %q lacks No change.", out)
	}
	st := status(t, c)
	d, ok := st.Staged()
	if !ok || d.Checksum != next {
		t.Fatalf("staged = %v, %v", d.ID, ok)
	}
	// Proof that it is still unlocked.
	if err := c.Finalize(ctx, d); !errors.Is(err, rpmostree.ErrAlreadyUnlocked) {
		t.Fatalf("Finalize of unlocked = %v, want ErrAlreadyUnlocked", err)
	}
	if err := c.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := status(t, c).Staged(); ok {
		t.Fatal("cleanup -p left the staged deployment")
	}
	if res, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: next}); err != nil || !res.Changed {
		t.Fatalf("restage = %+v, %v", res, err)
	}
	mustStaged(t, c)
	// Locked now: an orderly reboot keeps the booted deployment.
	e.PlannedReboot()
	if b, _ := status(t, c).Booted(); b.Checksum == next {
		t.Error("reboot applied the re-locked deployment")
	}
	// Contrast: an unlocked staged deployment IS applied by any reboot.
	e.CLI("sshd.service", "deploy", "revision="+next)
	e.PlannedReboot()
	if b, _ := status(t, c).Booted(); b.Checksum != next {
		t.Error("unlocked staged deployment was not applied by a reboot")
	}
}

func TestFinalizeRefusals(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e, agentUnit)
	ctx := context.Background()
	booted, _ := status(t, c).Booted()
	if err := c.Finalize(ctx, booted); !errors.Is(err, rpmostree.ErrNoStagedDeployment) {
		t.Errorf("nothing staged: %v", err)
	}
	e.Publish(e.Ref, 1)
	if _, err := c.Stage(ctx, rpmostree.StageRequest{}); err != nil {
		t.Fatal(err)
	}
	staged := mustStaged(t, c)
	wrong := staged
	wrong.Checksum = booted.Checksum
	err := c.Finalize(ctx, wrong)
	if !errors.Is(err, rpmostree.ErrChecksumMismatch) || !strings.Contains(err.Error(), "but found "+staged.Checksum) {
		t.Errorf("wrong checksum: %v", err)
	}
	e.SetInhibitors([]standin.Inhibitor{{What: "shutdown:sleep", Who: "etcd-backup", Why: "snapshot", Mode: "block"},
		{What: "shutdown", Who: "other", Why: "x", Mode: "block"}, {What: "shutdown", Who: "delayer", Why: "y", Mode: "delay"}})
	err = c.Finalize(ctx, staged)
	var oe *oplog.Error
	if !errors.Is(err, rpmostree.ErrInhibited) || !errors.As(err, &oe) || oe.ExitCode != 1 ||
		!strings.Contains(oe.Stderr, "Held by: etcd-backup") || !strings.Contains(oe.Stderr, "and 1 other blocking inhibitor lock(s)") {
		t.Errorf("inhibited: %v", err)
	}
	e.SetInhibitors([]standin.Inhibitor{{What: "shutdown", Who: "delayer", Why: "y", Mode: "delay"}})
	if e.Rebooted() {
		t.Fatal("a refused finalize rebooted")
	}
	if err := c.Finalize(ctx, staged); err != nil {
		t.Fatalf("finalize with only a delay inhibitor: %v", err)
	}
	if err := c.Finalize(ctx, staged); !errors.Is(err, rpmostree.ErrRebooting) {
		t.Errorf("second finalize after reboot initiated: %v", err)
	}
	e.PlannedReboot()
	if err := c.Finalize(ctx, staged); !errors.Is(err, rpmostree.ErrNoStagedDeployment) {
		t.Errorf("after reboot: %v", err)
	}
	// Already unlocked: staged without the lock.
	e.Publish(e.Ref, 2)
	e.CLI(agentUnit, "upgrade")
	if err := c.Finalize(ctx, mustStaged(t, c)); !errors.Is(err, rpmostree.ErrAlreadyUnlocked) {
		t.Errorf("unlocked: %v", err)
	}
	if _, stderr, code := e.CLI(agentUnit, "finalize-deployment", "--allow-unlocked", mustStaged(t, c).Checksum); code != 0 {
		t.Errorf("--allow-unlocked refused: %s", stderr)
	}
}

func TestCancelBySIGINTAndCancelVerb(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	e.StopDaemon()
	e.DaemonEnv = []string{standin.EnvPullDelay + "=60s"}
	e.StartDaemon()
	c := client(e, agentUnit)
	e.Publish(e.Ref, 1)

	running := func() bool { st, err := c.Status(context.Background()); return err == nil && st.Transaction != nil }
	for _, how := range []string{"sigint", "cancel"} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { _, err := c.Stage(ctx, rpmostree.StageRequest{}); done <- err }()
		if !standintest.WaitFor(timeout(t, 10*time.Second), running) {
			t.Fatal("transaction never showed in status")
		}
		st := status(t, c)
		if st.Transaction.Method != "Upgrade" || !strings.HasPrefix(st.Transaction.Path, "/org/projectatomic/rpmostree1/") {
			t.Errorf("transaction = %+v", st.Transaction)
		}
		// A second transaction is refused while one runs.
		if err := c.Cleanup(context.Background()); !errors.Is(err, rpmostree.ErrBusy) {
			t.Errorf("concurrent cleanup: %v", err)
		}
		if how == "sigint" {
			cancel() // oplog sends SIGINT; the CLI asks the daemon to cancel
		} else if err := c.Cancel(context.Background()); err != nil {
			t.Fatal(err)
		}
		err := <-done
		cancel()
		if !errors.Is(err, rpmostree.ErrCancelled) {
			t.Errorf("%s: Stage = %v, want ErrCancelled", how, err)
		}
		if time.Since(start) > 30*time.Second {
			t.Errorf("%s: cancel took %v", how, time.Since(start))
		}
		if st := status(t, c); st.Transaction != nil || len(st.Deployments) != 1 {
			t.Errorf("%s: after cancel: transaction %v, %d deployments", how, st.Transaction, len(st.Deployments))
		}
	}
	if err := c.Cancel(context.Background()); err != nil {
		t.Errorf("cancel with nothing running: %v", err)
	}
}

// TestTransactionOutlivesKilledClient: what the agent relies on after a
// SIGKILL mid-deploy, as upstream's rpm-ostreed does it: the transaction
// runs on without its client (status --json's "transaction" tuple, "State:
// busy"), another transaction is refused with upstream's message and exit
// 1, and `rpm-ostree cancel` ends it ("No active transaction." when idle).
func TestTransactionOutlivesKilledClient(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	e.StopDaemon()
	e.DaemonEnv = []string{standin.EnvPullDelay + "=60s"}
	e.StartDaemon()
	c := client(e, agentUnit)
	next := e.Publish(e.Ref, 1)

	deploy := exec.Command(e.Bin.RpmOstree, "deploy", "--lock-finalization", "revision="+next)
	deploy.Env = append(os.Environ(), e.ClientEnv(agentUnit)...)
	if err := deploy.Start(); err != nil {
		t.Fatal(err)
	}
	running := func() bool { st, err := c.Status(context.Background()); return err == nil && st.Transaction != nil }
	if !standintest.WaitFor(timeout(t, 10*time.Second), running) {
		t.Fatal("transaction never showed in status")
	}
	if err := deploy.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = deploy.Wait()
	st := status(t, c)
	if st.Transaction == nil || st.Transaction.Method != "Deploy" || !strings.HasPrefix(st.Transaction.Sender, ":1.") {
		t.Fatalf("after the client's SIGKILL: transaction %+v, want the Deploy still running", st.Transaction)
	}
	if out, _, code := e.CLI(agentUnit, "status"); code != 0 || !strings.HasPrefix(out, "State: busy\n") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	_, stderr, code := e.CLI(agentUnit, "deploy", "--lock-finalization", "revision="+next)
	if code != 1 || !strings.HasPrefix(stderr, "error: Transaction in progress: ") ||
		!strings.Contains(stderr, "\n You can cancel the current transaction with `rpm-ostree cancel`\n") {
		t.Errorf("a second transaction: exit %d, stderr %q", code, stderr)
	}
	out, stderr, code := e.CLI(agentUnit, "cancel")
	if code != 0 || !strings.HasPrefix(out, "Cancelling transaction: ") || !strings.HasSuffix(out, "Cancelled.\n") {
		t.Errorf("cancel: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if st := status(t, c); st.Transaction != nil || len(st.Deployments) != 1 {
		t.Errorf("after cancel: transaction %v, %d deployments", st.Transaction, len(st.Deployments))
	}
	if out, _, code := e.CLI(agentUnit, "cancel"); code != 0 || out != "No active transaction.\n" {
		t.Errorf("cancel when idle: exit %d, stdout %q", code, out)
	}
}

func TestUnplannedRebootDiscardsStaged(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e, agentUnit)
	booted, _ := status(t, c).Booted()
	e.Publish(e.Ref, 1)
	if _, err := c.Stage(context.Background(), rpmostree.StageRequest{}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.Checkouts("fedora-coreos")); n != 2 {
		t.Fatalf("%d checkouts before reboot", n)
	}
	e.UnplannedReboot()
	st := status(t, c)
	if _, ok := st.Staged(); ok || len(st.Deployments) != 1 {
		t.Fatalf("after power cut: %+v", st.Deployments)
	}
	if b, _ := st.Booted(); b.Checksum != booted.Checksum {
		t.Error("booted changed")
	}
	if got := e.Checkouts("fedora-coreos"); len(got) != 1 {
		t.Errorf("orphaned checkout kept: %v", got)
	}
}

func TestUpdateDriver(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	agent := client(e, agentUnit)
	ctx := context.Background()
	if err := agent.RegisterDriver(ctx, "update-agent"); err != nil {
		t.Fatal(err)
	}
	drv := status(t, agent).UpdateDriver
	if drv == nil || drv.Name != "update-agent" || drv.Unit != agentUnit {
		t.Fatalf("update-driver = %+v", drv)
	}
	e.Publish(e.Ref, 1)
	// Staging runs in a transient unit: refused unless bypassing.
	stager := client(e, "update-agent-stage.service")
	_, err := stager.Stage(ctx, rpmostree.StageRequest{})
	if !errors.Is(err, rpmostree.ErrDriverRegistered) || !strings.Contains(err.Error(), "Use --bypass-driver") {
		t.Fatalf("stage from another unit: %v", err)
	}
	if _, err := stager.Check(ctx); !errors.Is(err, rpmostree.ErrDriverRegistered) {
		t.Errorf("check from another unit: %v", err)
	}
	stager.BypassDriver = true
	if r, err := stager.Check(ctx); err != nil || !r.Available {
		t.Errorf("check with --bypass-driver: %+v, %v", r, err)
	}
	if res, err := stager.Stage(ctx, rpmostree.StageRequest{}); err != nil || !res.Changed {
		t.Errorf("stage with --bypass-driver: %+v, %v", res, err)
	}
	// The driver's own unit is not refused.
	if err := agent.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Stage(ctx, rpmostree.StageRequest{}); err != nil {
		t.Errorf("stage from the driver's unit: %v", err)
	}
	// The registration lives in /run.
	e.UnplannedReboot()
	if d := status(t, agent).UpdateDriver; d != nil {
		t.Errorf("driver survived a reboot: %+v", d)
	}
}

func TestRebaseAndDeployOlder(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e, agentUnit)
	ctx := context.Background()
	first, _ := status(t, c).Booted()
	// Commit timestamps have whole seconds: make os/next newer than the
	// booted commit, so deploying the booted one is a downgrade.
	time.Sleep(1100 * time.Millisecond)
	nextRef := e.Publish("os/next", 3)
	if res, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageRebase, Ref: "fedora:os/next"}); err != nil || !res.Changed {
		t.Fatalf("rebase = %+v, %v", res, err)
	}
	d := mustStaged(t, c)
	if d.Origin != "fedora:os/next" || d.Checksum != nextRef {
		t.Errorf("rebased staged = %+v", d)
	}
	before := status(t, c)
	if res, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageRebase, Ref: "fedora:os/next"}); err != nil || res.Changed {
		t.Errorf("rebase again = %+v, %v; want unchanged", res, err)
	}
	if rpmostree.StagedChanged(before, status(t, c)) {
		t.Error("StagedChanged after a no-op rebase")
	}
	// The booted commit is older than the staged one: refused unless
	// downgrades are allowed (compared, as rpm-ostree does, with the
	// pending deployment).
	_, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: first.Checksum})
	if err == nil || !strings.Contains(err.Error(), "is chronologically older than current revision") {
		t.Fatalf("deploy of an older revision = %v, want refused", err)
	}
	if rpmostree.StagedChanged(before, status(t, c)) {
		t.Error("a refused downgrade changed the staged deployment")
	}
	// deploy revision= of the booted commit: a new deployment, serial 1.
	if res, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: first.Checksum, AllowDowngrade: true}); err != nil || !res.Changed {
		t.Fatalf("deploy booted revision = %+v, %v", res, err)
	}
	if !rpmostree.StagedChanged(before, status(t, c)) {
		t.Error("StagedChanged missed a new deployment")
	}
	if d := mustStaged(t, c); d.Serial != 1 || d.ID != fmt.Sprintf("fedora-coreos-%s.1", first.Checksum) {
		t.Errorf("redeploy of booted commit = %+v", d)
	}
	_, stderr, code := e.CLI(agentUnit, "deploy", "revision=nothex")
	if code != 1 || !strings.HasPrefix(stderr, "error: ") {
		t.Errorf("bad revision: exit %d %q", code, stderr)
	}
	_, stderr, code = e.CLI(agentUnit, "upgrade", "--no-such-flag")
	if code != 1 || !strings.Contains(stderr, "error: Unknown option --no-such-flag") {
		t.Errorf("unknown flag: exit %d %q", code, stderr)
	}
}

package bootc_test

// Contract tests: the client against the bootc stand-in (real ostree I/O on
// the rpm-ostree stand-in's sysroot, whose daemon runs as a child process).

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/tests/rpmostree/standin"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

var bins standintest.Binaries

func TestMain(m *testing.M) { standintest.Main(m, &bins) }

func client(e *standintest.Env, extra ...string) *bootc.Client {
	return &bootc.Client{Path: e.Bin.Bootc,
		Runner: oplog.Runner{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Env: e.BootcEnv(extra...)}}
}

func status(t *testing.T, c *bootc.Client) *bootc.Host {
	t.Helper()
	h, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// stage runs StageArgv as the agent's staging unit would.
func stage(t *testing.T, e *standintest.Env, c *bootc.Client) string {
	t.Helper()
	argv := c.StageArgv()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(cmd.Environ(), e.BootcEnv()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v\n%s", argv, err, out)
	}
	return string(out)
}

// TestDownloadOnlyThenApply is the agent's cycle on bootc: check, stage
// download-only (locked), an unplanned reboot loses it without applying
// it, stage again, then --from-downloaded --apply unlocks and reboots
// into it.
func TestDownloadOnlyThenApply(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e)
	ctx := context.Background()

	v, err := c.Version(ctx)
	if err != nil || bootc.RequireDownloadOnly(v) != nil {
		t.Fatalf("version %v: %v", v, err)
	}
	h := status(t, c)
	if !h.Managed() || h.APIVersion != bootc.APIVersion || h.Status.Staged != nil {
		t.Fatalf("fresh host: %+v", h)
	}
	booted := h.Status.Booted.Digest()
	if !strings.HasPrefix(booted, "sha256:") || booted == "sha256:"+h.Status.Booted.Ostree.Checksum {
		t.Fatalf("booted digest %q (ostree %s)", booted, h.Status.Booted.Ostree.Checksum)
	}
	if r, err := c.Check(ctx); err != nil || r.Available {
		t.Fatalf("check with nothing published: %+v, %v", r, err)
	}

	e.Publish(e.Ref, 1)
	r, err := c.Check(ctx)
	if err != nil || !r.Available || r.Digest == "" || r.Digest == booted {
		t.Fatalf("check after publishing: %+v, %v", r, err)
	}
	if got := status(t, c).Status.Booted.CachedUpdate; got == nil || got.ImageDigest != r.Digest {
		t.Fatalf("check did not record the cached update: %+v", got)
	}
	out := stage(t, e, c)
	if !strings.Contains(out, "Queued for next boot") {
		t.Errorf("staging said %q", out)
	}
	s := status(t, c).Status.Staged
	if s.Digest() != r.Digest || !s.DownloadOnly {
		t.Fatalf("staged %+v, want %s download-only", s, r.Digest)
	}

	e.UnplannedReboot()
	h = status(t, c)
	if h.Status.Staged != nil || h.Status.Booted.Digest() != booted {
		t.Fatalf("after an unplanned reboot: staged %+v, booted %s", h.Status.Staged, h.Status.Booted.Digest())
	}
	// The trap: the image is in the host's store, so --check says "No
	// changes"; the cached update still names it.
	if r2, err := c.Check(ctx); err != nil || r2.Available {
		t.Fatalf("check after losing the staged update: %+v, %v", r2, err)
	}
	if cu := h.Status.Booted.CachedUpdate; cu == nil || cu.ImageDigest != r.Digest {
		t.Fatalf("cached update after the reboot: %+v", cu)
	}
	stage(t, e, c)
	if s := status(t, c).Status.Staged; s.Digest() != r.Digest || !s.DownloadOnly {
		t.Fatalf("staged again %+v", s)
	}

	err = c.Apply(ctx, 3*time.Second)
	if !errors.Is(err, bootc.ErrApplyRunning) {
		t.Fatalf("apply: %v, want it still running (rebooting)", err)
	}
	if !e.Rebooted() {
		t.Fatal("apply did not run the reboot command")
	}
	if s := status(t, c).Status.Staged; s == nil || s.DownloadOnly {
		t.Fatalf("after apply, staged %+v: want it unlocked", s)
	}
	e.PlannedReboot()
	h = status(t, c)
	if h.Status.Booted.Digest() != r.Digest || h.Status.Staged != nil || h.Status.Rollback.Digest() != booted {
		t.Fatalf("after the planned reboot: %+v", h.Status)
	}
}

// TestDownloadOnlyRelocks: unlike rpm-ostree, bootc re-locks a staged
// update that is the newest when asked --download-only again.
func TestDownloadOnlyRelocks(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e)
	e.Publish(e.Ref, 1)
	stage(t, e, c)
	if out, _, code := e.Bootc(nil, "upgrade"); code != 0 || !strings.Contains(out, "Staged deployment will now be applied on reboot") {
		t.Fatalf("plain upgrade: %d %q", code, out)
	}
	if s := status(t, c).Status.Staged; s.DownloadOnly {
		t.Fatal("plain upgrade left it download-only")
	}
	if out := stage(t, e, c); !strings.Contains(out, "Image downloaded, but will not be applied on reboot") {
		t.Fatalf("re-staging said %q", out)
	}
	if s := status(t, c).Status.Staged; !s.DownloadOnly {
		t.Fatal("not locked again")
	}
	if out := stage(t, e, c); !strings.Contains(out, "Staged update present, not changed") {
		t.Fatalf("staging once more said %q", out)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	ctx := context.Background()

	err := client(e).Apply(ctx, 10*time.Second)
	if !errors.Is(err, bootc.ErrNoStagedDeployment) || !strings.Contains(err.Error(), "No staged deployment found") {
		t.Errorf("apply with nothing staged: %v", err)
	}
	if e.Rebooted() {
		t.Error("rebooted with nothing staged")
	}

	_, stderr, code := e.Bootc(nil, "upgrade", "--download-only", "--apply")
	if code != 2 || !strings.Contains(stderr, "error: the argument '--download-only' cannot be used with '--apply'") {
		t.Errorf("conflicting flags: %d %q", code, stderr)
	}
	_, stderr, code = e.Bootc(nil, "upgrade", "--from-downloaded", "--check")
	if code != 2 || !strings.Contains(stderr, "cannot be used with") {
		t.Errorf("conflicting flags: %d %q", code, stderr)
	}

	old := client(e, standin.EnvBootcVersion+"=1.11.2")
	v, err := old.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := bootc.RequireDownloadOnly(v); !errors.Is(err, bootc.ErrTooOld) || !strings.Contains(err.Error(), "bootc 1.11.2 is installed") {
		t.Errorf("old bootc: %v", err)
	}
	_, err = old.Runner.Run(ctx, "staging", old.StageArgv()...)
	if oplog.ExitCode(err) != 2 || !strings.Contains(err.Error(), "unexpected argument '--download-only' found") {
		t.Errorf("old bootc staging: %v", err)
	}

	pkg := client(e, standin.EnvBootcPackageMode+"=1")
	if h := status(t, pkg); h.Managed() || h.Spec.Image != nil {
		t.Errorf("package-mode host reported as bootc-managed: %+v", h)
	}
	if _, err := pkg.Check(ctx); !errors.Is(err, bootc.ErrNoImage) {
		t.Errorf("check on a package-mode host: %v", err)
	}
}

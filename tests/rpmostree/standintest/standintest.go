// Package standintest runs the rpm-ostree stand-in for tests: it builds the
// binaries, makes an update repo with mkupdate, initializes a temporary
// sysroot and runs the daemon as a child process (no systemd needed).
package standintest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/rpmostree/standin"
)

// Binaries are the built stand-in tools.
type Binaries struct {
	RpmOstree string
	MkUpdate  string
	// Bootc is the bootc stand-in (same sysroot as RpmOstree's).
	Bootc string
}

// Build compiles the stand-in rpm-ostree and mkupdate into dir, static
// (the guest e2e copies them into the test guest). Call it once from
// TestMain, or once per guest.
func Build(dir string) (Binaries, error) {
	b := Binaries{RpmOstree: filepath.Join(dir, "rpm-ostree"), MkUpdate: filepath.Join(dir, "mkupdate"),
		Bootc: filepath.Join(dir, "bootc")}
	for out, pkg := range map[string]string{
		b.RpmOstree: "github.com/update-agent/update-agent/tests/rpmostree/cmd/rpm-ostree",
		b.MkUpdate:  "github.com/update-agent/update-agent/tests/mkupdate",
		b.Bootc:     "github.com/update-agent/update-agent/tests/rpmostree/cmd/bootc",
	} {
		cmd := exec.Command(goBin(), "build", "-trimpath", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %v\n%s", pkg, err, msg)
		}
	}
	return b, nil
}

// Main is a TestMain for packages whose tests run the stand-in: it builds
// the binaries into a temp dir, stores them in *bin, runs the tests and
// cleans up. Without the ostree CLI it fails: those tests must not pass by
// skipping (.ci/run installs ostree).
func Main(m *testing.M, bin *Binaries) {
	if !Have() {
		fmt.Fprintln(os.Stderr, "the ostree CLI is not installed (apt-get install ostree): the stand-in cannot run")
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "standin-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *bin, err = Build(dir); err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func goBin() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// Have reports whether the ostree CLI is installed.
func Have() bool {
	_, err := exec.LookPath("ostree")
	return err == nil
}

// Env is one host: an update repo, a sysroot and a running daemon.
type Env struct {
	t   testing.TB
	Bin Binaries
	Dir string
	// UpdateRepo is the "remote" (archive mode), served as file://.
	UpdateRepo string
	Remote     string
	Ref        string
	RunDir     string
	Sysroot    string
	// RebootFile appears when the daemon runs its reboot command.
	RebootFile string
	// Inhibitors is the file standing in for logind's inhibitor list.
	Inhibitors string
	// DaemonEnv is extra environment for the daemon (e.g. a pull delay).
	DaemonEnv []string

	workdir string
	daemon  *exec.Cmd
	waited  chan struct{}
	logFile string
}

// New publishes generation 0, installs it as the booted deployment and
// starts the daemon. Everything is torn down at the end of the test.
func New(t testing.TB, bin Binaries) *Env {
	t.Helper()
	dir := t.TempDir()
	e := &Env{t: t, Bin: bin, Dir: dir, UpdateRepo: filepath.Join(dir, "updates"), Remote: "fedora",
		Ref: "os/stable", RunDir: filepath.Join(dir, "run"), Sysroot: filepath.Join(dir, "sysroot"),
		RebootFile: filepath.Join(dir, "rebooted"), Inhibitors: filepath.Join(dir, "inhibitors.json"),
		workdir: filepath.Join(dir, "mkupdate"), logFile: filepath.Join(dir, "daemon.log")}
	e.Publish(e.Ref, 0)
	e.run(bin.RpmOstree, "standin-init", "--osname=fedora-coreos", "--remote="+e.Remote,
		"--url=file://"+e.UpdateRepo, "--per-object-fsync", e.Ref)
	e.StartDaemon()
	t.Cleanup(func() {
		e.StopDaemon()
		if t.Failed() {
			b, _ := os.ReadFile(e.logFile)
			t.Logf("daemon log:\n%s", b)
		}
	})
	return e
}

// ClientEnv is the environment a client of this host needs; unit is the
// systemd unit the client pretends to run in (update-driver checks).
func (e *Env) ClientEnv(unit string) []string {
	env := []string{standin.EnvRunDir + "=" + e.RunDir, standin.EnvSysroot + "=" + e.Sysroot}
	if unit != "" {
		env = append(env, standin.EnvCallerUnit+"="+unit)
	}
	return env
}

// BootcEnv is the environment of a bootc client of this host: bootc has
// no daemon, so the CLI itself runs the reboot command; extra is added
// (e.g. standin.EnvBootcVersion).
func (e *Env) BootcEnv(extra ...string) []string {
	env := append(e.ClientEnv(""), standin.EnvRebootCmd+"=touch "+e.RebootFile)
	return append(env, extra...)
}

// Bootc runs the bootc stand-in with BootcEnv(extra) and returns stdout,
// stderr and the exit code.
func (e *Env) Bootc(extra []string, args ...string) (string, string, int) {
	e.t.Helper()
	cmd := exec.Command(e.Bin.Bootc, args...)
	cmd.Env = append(os.Environ(), e.BootcEnv(extra...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), stderr.String(), code
}

func (e *Env) daemonEnv() []string {
	env := append(os.Environ(), e.ClientEnv("")...)
	env = append(env, standin.EnvRebootCmd+"=touch "+e.RebootFile, standin.EnvInhibitors+"="+e.Inhibitors)
	return append(env, e.DaemonEnv...)
}

func (e *Env) run(argv ...string) string {
	e.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = e.daemonEnv()
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	return strings.TrimSpace(out.String())
}

// Publish commits generation gen of the synthetic OS (a few hundred KB) to
// ref in the update repo and returns its checksum.
func (e *Env) Publish(ref string, gen int) string {
	e.t.Helper()
	return e.run(e.Bin.MkUpdate, "-repo", e.UpdateRepo, "-ref", ref, "-size", "2MiB", "-files", "60",
		"-generation", strconv.Itoa(gen), "-workdir", e.workdir, "-mutate", "0.3")
}

// CLI runs the stand-in CLI as a client in unit and returns stdout, stderr
// and the exit code.
func (e *Env) CLI(unit string, args ...string) (string, string, int) {
	cmd := exec.Command(e.Bin.RpmOstree, args...)
	cmd.Env = append(os.Environ(), e.ClientEnv(unit)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), stderr.String(), code
}

// StartDaemon starts rpm-ostreed and waits until it answers.
func (e *Env) StartDaemon() {
	e.t.Helper()
	log, err := os.OpenFile(e.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(e.Bin.RpmOstree, "start-daemon")
	cmd.Env = e.daemonEnv()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	log.Close()
	e.daemon, e.waited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(e.waited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, code := e.CLI("", "status", "--json"); code == 0 {
			return
		}
		select {
		case <-e.waited:
			b, _ := os.ReadFile(e.logFile)
			e.t.Fatalf("daemon exited at start:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatal("daemon did not come up in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StopDaemon stops the daemon (SIGTERM, as systemd does).
func (e *Env) StopDaemon() { e.signalDaemon(syscall.SIGTERM) }

func (e *Env) signalDaemon(sig syscall.Signal) {
	if e.daemon == nil {
		return
	}
	_ = e.daemon.Process.Signal(sig)
	select {
	case <-e.waited:
	case <-time.After(20 * time.Second):
		_ = e.daemon.Process.Kill()
		<-e.waited
	}
	e.daemon = nil
}

// PlannedReboot is an orderly reboot: the daemon stops, the shutdown hook
// finalizes an unlocked staged deployment, /run is lost, the daemon starts.
// It returns the hook's output.
func (e *Env) PlannedReboot() string {
	e.t.Helper()
	e.StopDaemon()
	cmd := exec.Command(e.Bin.RpmOstree, "standin-finalize-staged")
	cmd.Env = e.daemonEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("standin-finalize-staged: %v\n%s", err, out)
	}
	e.wipeRun()
	return string(out)
}

// UnplannedReboot is a power cut: the daemon dies, no shutdown hook runs,
// /run is lost.
func (e *Env) UnplannedReboot() {
	e.t.Helper()
	e.signalDaemon(syscall.SIGKILL)
	e.wipeRun()
}

func (e *Env) wipeRun() {
	e.t.Helper()
	if err := os.RemoveAll(e.RunDir); err != nil {
		e.t.Fatal(err)
	}
	_ = os.Remove(e.RebootFile)
	e.StartDaemon()
}

// DaemonLog is what the daemon logged so far.
func (e *Env) DaemonLog() string {
	b, _ := os.ReadFile(e.logFile)
	return string(b)
}

// Rebooted reports whether the daemon ran its reboot command.
func (e *Env) Rebooted() bool {
	_, err := os.Stat(e.RebootFile)
	return err == nil
}

// SetInhibitors replaces the inhibitor locks logind would report.
func (e *Env) SetInhibitors(l []standin.Inhibitor) {
	e.t.Helper()
	b, _ := json.Marshal(l)
	if err := os.WriteFile(e.Inhibitors, b, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// Checkouts lists the deployment checkouts under the sysroot.
func (e *Env) Checkouts(osname string) []string {
	ents, _ := os.ReadDir(filepath.Join(e.Sysroot, "ostree", "deploy", osname, "deploy"))
	var out []string
	for _, d := range ents {
		out = append(out, d.Name())
	}
	return out
}

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(ctx context.Context, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Image is the container image reference, with signature prefix sig
// ("ostree-unverified-registry:"), that the stand-in backs with the
// host's ref (tests/rpmostree/standin/container.go).
func (e *Env) Image(sig string) string { return sig + e.Remote + "/" + e.Ref }

// BootImage rebases the host to image and reboots into it: a host booted
// from a container image.
func (e *Env) BootImage(image string) {
	e.t.Helper()
	if out, stderr, code := e.CLI("", "rebase", image); code != 0 {
		e.t.Fatalf("rebase %s: exit %d\n%s%s", image, code, out, stderr)
	}
	e.PlannedReboot()
}

// OnStream writes an rpm-ostree wrapper around rpmOstree whose status names
// stream on every deployment (the fedora-coreos.stream commit metadata a
// Fedora CoreOS commit carries and the stand-in's commits lack) and returns
// its path.
func OnStream(t testing.TB, rpmOstree, stream string) string {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "rpm-ostree")
	script := "#!/bin/sh\nif [ \"$1\" = status ]; then " + rpmOstree +
		" \"$@\" | sed 's/\"ostree.bootable\": *true/&,\"fedora-coreos.stream\":\"" + stream + "\"/g'; exit $?; fi\nexec " + rpmOstree + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

package standin

// The bootc stand-in: bootc's CLI contract (crates/lib/src/cli.rs: flags
// and their conflicts as clap enforces them, exit 2 for a rejected command
// line, "error: ..." and exit 1 for a failure; spec.rs: status JSON) over
// the same deployments as the rpm-ostree stand-in (an image-mode host has
// both tools on one sysroot). bootc has no daemon: the CLI does the I/O
// itself, holding the sysroot lock.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/update-agent/update-agent/agent/oplog"
)

// Environment of the bootc stand-in, beside Config's (shared sysroot, run
// dir, ostree binary and reboot command).
const (
	// EnvBootcVersion is the version `bootc --version` reports; below
	// 1.12.0 the CLI lacks --download-only and --from-downloaded, as the
	// real one did.
	EnvBootcVersion = "BOOTC_STANDIN_VERSION"
	// EnvBootcPackageMode=1 makes status report a package-mode host (the
	// booted deployment not from an image), as bootc does on an rpm-ostree
	// host.
	EnvBootcPackageMode = "BOOTC_STANDIN_PACKAGE_MODE"
)

// DefaultBootcVersion is the version reported by default.
const DefaultBootcVersion = "1.12.0"

// usageExit is clap's exit code for a rejected command line.
const usageExit = 2

// clapErr is printed like clap's errors, with the usage line.
type clapErr struct{ msg, usage string }

func (e clapErr) Error() string { return e.msg }

type bootcCLI struct {
	cfg            Config
	version        [3]int
	packageMode    bool
	stdout, stderr io.Writer
	log            *slog.Logger
}

// BootcMain runs the bootc stand-in and returns its exit code.
func BootcMain(args []string, stdout, stderr io.Writer) int {
	c := &bootcCLI{cfg: FromEnv(), stdout: stdout, stderr: stderr, packageMode: os.Getenv(EnvBootcPackageMode) == "1",
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	v := env(EnvBootcVersion, DefaultBootcVersion)
	if _, err := fmt.Sscanf(v, "%d.%d.%d", &c.version[0], &c.version[1], &c.version[2]); err != nil {
		fmt.Fprintf(stderr, "error: %s=%q: %v\n", EnvBootcVersion, v, err)
		return exitFailure
	}
	err := c.dispatch(args)
	var ce clapErr
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		fmt.Fprintf(stderr, "error: %s\n\nUsage: %s\n\nFor more information, try '--help'.\n", ce.msg, ce.usage)
		return usageExit
	}
	fmt.Fprintf(stderr, "error: %s\n", err)
	return exitFailure
}

func (c *bootcCLI) hasDownloadOnly() bool {
	return c.version[0] > 1 || (c.version[0] == 1 && c.version[1] >= 12)
}

func (c *bootcCLI) dispatch(args []string) error {
	if len(args) == 0 {
		return clapErr{"'bootc' requires a subcommand but one was not provided", "bootc <COMMAND>"}
	}
	switch args[0] {
	case "--version", "-V":
		fmt.Fprintf(c.stdout, "bootc %d.%d.%d\n", c.version[0], c.version[1], c.version[2])
		return nil
	case "status":
		return c.status(args[1:])
	case "upgrade", "update":
		return c.upgradeCmd(args[1:])
	}
	return clapErr{fmt.Sprintf("unrecognized subcommand '%s'", args[0]), "bootc <COMMAND>"}
}

// bootcOpts parses like clap: --long, --long=VALUE, --long VALUE; unknown
// flags and stray arguments are rejected with the usage line.
func bootcOpts(args []string, usage string, specs []opt) (parsed, error) {
	p, err := parseOpts(args, specs)
	if err != nil {
		arg, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(err.Error(), "Unknown option "), "Missing argument for "), "=")
		if strings.HasPrefix(err.Error(), "Missing") {
			return p, clapErr{fmt.Sprintf("a value is required for '%s <VALUE>' but none was supplied", arg), usage}
		}
		return p, clapErr{fmt.Sprintf("unexpected argument '%s' found", arg), usage}
	}
	if len(p.args) > 0 {
		return p, clapErr{fmt.Sprintf("unexpected argument '%s' found", p.args[0]), usage}
	}
	return p, nil
}

// conflicts rejects pairs of flags clap declares conflicting.
func conflicts(p parsed, usage string, pairs ...[2]string) error {
	for _, pr := range pairs {
		if p.has(pr[0]) && p.has(pr[1]) {
			return clapErr{fmt.Sprintf("the argument '--%s' cannot be used with '--%s'", pr[0], pr[1]), usage}
		}
	}
	return nil
}

// open takes the sysroot lock (bootc waits for it) and the deployments.
func (c *bootcCLI) open(ctx context.Context) (store, ostreeCLI, func(), error) {
	ot := newOstree(c.cfg, oplog.Runner{Log: c.log})
	if err := os.MkdirAll(c.cfg.RunDir, 0o755); err != nil {
		return nil, ot, nil, err
	}
	f, err := os.OpenFile(filepath.Join(c.cfg.RunDir, "bootc-sysroot.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, ot, nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, ot, nil, fmt.Errorf("Acquiring sysroot lock: %w", err)
	}
	unlock := func() { f.Close() }
	if c.cfg.RealSysroot {
		return newSysrootStore(ot), ot, unlock, nil
	}
	fs, err := newFileStore(c.cfg, ot, c.log)
	if err != nil {
		unlock()
		return nil, ot, nil, err
	}
	return fs, ot, unlock, nil
}

// reboot is bootc's reboot::reboot: start the reboot, then wait to be
// stopped by it (a successful --apply never returns); the stand-in dies
// of the signal, as bootc does.
func (c *bootcCLI) reboot(ctx context.Context) error {
	if len(c.cfg.RebootCmd) == 0 {
		return errors.New("Initiating reboot: no reboot command")
	}
	if _, err := (oplog.Runner{Log: c.log}).Run(ctx, "rebooting", c.cfg.RebootCmd...); err != nil {
		return fmt.Errorf("Initiating reboot: %w", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := (<-sig).(syscall.Signal)
	signal.Reset(s)
	_ = syscall.Kill(os.Getpid(), s)
	select {}
}

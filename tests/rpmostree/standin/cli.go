package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/update-agent/update-agent/agent/oplog"
)

// Exit codes of the real CLI.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUnchanged = 77
)

// Version is what `--version` reports.
const Version = "2024.9"

// cli is one invocation of the stand-in rpm-ostree.
type cli struct {
	cfg            Config
	stdout, stderr io.Writer
	cmdline        string
}

// usageErr is printed with a usage line, like rpmostree_usage_error.
type usageErr struct{ verb, msg string }

func (e usageErr) Error() string { return e.msg }

// exitErr carries a non-error exit code (77).
type exitErr int

func (e exitErr) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// Main runs the CLI and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	c := &cli{cfg: FromEnv(), stdout: stdout, stderr: stderr, cmdline: "rpm-ostree " + strings.Join(args, " ")}
	err := c.dispatch(args)
	var code exitErr
	var ue usageErr
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "Usage:\n  rpm-ostree %s [OPTION…]\n\n", ue.verb)
	}
	fmt.Fprintf(stderr, "error: %s\n", err)
	return exitFailure
}

func (c *cli) dispatch(args []string) error {
	if len(args) == 0 {
		return usageErr{"COMMAND", "No command specified"}
	}
	verb, rest := args[0], args[1:]
	switch verb {
	case "--version":
		fmt.Fprintf(c.stdout, "rpm-ostree:\n Version: '%s'\n Features:\n  - standin\n", Version)
		return nil
	case "status":
		return c.status(rest)
	case "upgrade", "update":
		return c.upgrade(rest)
	case "deploy":
		return c.deploy(rest)
	case "rebase":
		return c.rebase(rest)
	case "finalize-deployment":
		return c.finalizeDeployment(rest)
	case "cleanup":
		return c.cleanup(rest)
	case "cancel":
		if _, err := parseOpts(rest, commonOpts); err != nil {
			return usageErr{verb, err.Error()}
		}
		_, err := c.call(Request{Verb: "cancel"})
		return err
	case "start-daemon":
		return c.startDaemon()
	case "standin-init":
		return c.initSysroot(rest)
	case "standin-layer":
		return c.layer(rest)
	case "standin-finalize-staged":
		return FinalizeStaged(c.cfg, slog.New(slog.NewTextHandler(c.stderr, nil)))
	}
	return fmt.Errorf("Unknown command '%s'", verb)
}

// call sends req, prints the transaction's messages, and turns SIGINT into
// a cancellation request, as rpm-ostree's client does.
func (c *cli) call(req Request) (Event, error) {
	req.Cmdline = c.cmdline
	req.Sender = fmt.Sprintf(":1.%d", os.Getpid())
	req.CallerUnit = callerUnit()
	req.ClientID = os.Getenv("RPMOSTREE_CLIENT_ID")
	sig := make(chan os.Signal, 1)
	cancel := make(chan struct{})
	if req.Verb != "status" {
		signal.Notify(sig, syscall.SIGINT)
		defer signal.Stop(sig)
		go func() {
			if _, ok := <-sig; ok {
				fmt.Fprintln(c.stderr, "Caught SIGINT, cancelling transaction")
				fmt.Fprintln(c.stderr, "Awaiting transaction cancellation...")
				close(cancel)
			}
		}()
	}
	ev, err := Call(c.cfg.Socket, req, func(m string) { fmt.Fprintln(c.stdout, m) }, cancel)
	if err != nil {
		return ev, err
	}
	if ev.Error != "" {
		return ev, errors.New(ev.Error)
	}
	return ev, nil
}

func (c *cli) status(args []string) error {
	p, err := parseOpts(args, commonOpts, []opt{{long: "json"}, {long: "booted", short: 'b'},
		{long: "verbose", short: 'v'}, {long: "pretty", short: 'p'}, {long: "advisories", short: 'a'},
		{long: "jsonpath", short: 'J', arg: true}, {long: "pending-exit-77"}})
	if err != nil {
		return usageErr{"status", err.Error()}
	}
	if p.has("jsonpath") {
		return errors.New("--jsonpath is not supported by the stand-in")
	}
	ev, err := c.call(Request{Verb: "status"})
	if err != nil {
		return err
	}
	if p.has("json") {
		raw := ev.Status
		if p.has("booted") {
			if raw, err = onlyBootedJSON(raw); err != nil {
				return err
			}
		}
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s\n", b.Bytes())
		return nil
	}
	out, err := FormatStatus(ev.Status, p.has("booted"))
	if err != nil {
		return err
	}
	fmt.Fprint(c.stdout, out)
	return nil
}

// onlyBootedJSON keeps only the booted deployment, as `status --json -b`.
func onlyBootedJSON(raw []byte) ([]byte, error) {
	var st map[string]json.RawMessage
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, err
	}
	var deps []map[string]any
	if err := json.Unmarshal(st["deployments"], &deps); err != nil {
		return nil, err
	}
	kept := []map[string]any{}
	for _, d := range deps {
		if b, _ := d["booted"].(bool); b {
			kept = append(kept, d)
		}
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	st["deployments"] = b
	return json.Marshal(st)
}

// driverCheck is error_if_driver_registered: refuse when another systemd
// unit registered as update driver and is active.
func (c *cli) driverCheck() error {
	ev, err := c.call(Request{Verb: "status"})
	if err != nil {
		return err
	}
	var st struct {
		Driver *Driver `json:"update-driver"`
	}
	if err := json.Unmarshal(ev.Status, &st); err != nil || st.Driver == nil {
		return err
	}
	if st.Driver.Unit == callerUnit() || !unitActive(st.Driver.Unit) {
		return nil
	}
	n := st.Driver.Name
	return fmt.Errorf("Updates and deployments are driven by %s (%s)\nSee %s's documentation\nUse --bypass-driver to bypass %s and perform the operation anyways",
		n, st.Driver.Unit, n, n)
}

// unitActive asks systemd when it runs; without systemd a registered
// driver counts as active.
func unitActive(unit string) bool {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return true
	}
	r := oplog.Runner{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res, _ := r.Run(context.Background(), "checking driver unit", "systemctl", "is-active", unit)
	return strings.TrimSpace(string(res.Stdout)) == "active"
}

var upgradeOpts = []opt{{long: "reboot", short: 'r'}, {long: "allow-downgrade"}, {long: "check-diff"},
	{long: "preview"}, {long: "check"}, {long: "cache-only", short: 'C'}, {long: "download-only"},
	{long: "upgrade-unchanged-exit-77"}, {long: "unchanged-exit-77"}, {long: "trigger-automatic-update-policy"},
	{long: "lock-finalization"}, {long: "bypass-driver"}}

func (c *cli) upgrade(args []string) error {
	p, err := parseOpts(args, commonOpts, upgradeOpts)
	if err != nil {
		return usageErr{"upgrade", err.Error()}
	}
	preview := p.has("preview") || p.has("check-diff")
	check := p.has("check") || preview
	switch {
	case p.has("reboot") && preview:
		return errors.New("Cannot specify both --reboot and --preview")
	case p.has("reboot") && check:
		return errors.New("Cannot specify both --reboot and --check")
	case p.has("reboot"):
		return errors.New("--reboot is not supported by the stand-in")
	}
	if !p.has("bypass-driver") {
		if err := c.driverCheck(); err != nil {
			return err
		}
	}
	if check {
		ev, err := c.call(Request{Verb: "check"})
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stderr, "Note: --check and --preview may be unreliable.  See https://github.com/coreos/rpm-ostree/issues/1579")
		if ev.Update == nil {
			fmt.Fprintln(c.stdout, "No updates available.")
			return exitErr(exitUnchanged)
		}
		fmt.Fprint(c.stdout, formatCheck(*ev.Update))
		return nil
	}
	ev, err := c.call(Request{Verb: "upgrade", LockFinalization: p.has("lock-finalization"), AllowDowngrade: p.has("allow-downgrade")})
	if err != nil {
		return err
	}
	return c.afterStage(ev, p.has("unchanged-exit-77") || p.has("upgrade-unchanged-exit-77"))
}

func (c *cli) afterStage(ev Event, exit77 bool) error {
	if !ev.Changed {
		if exit77 {
			return exitErr(exitUnchanged)
		}
		return nil
	}
	fmt.Fprintln(c.stdout, `Run "systemctl reboot" to start a reboot`)
	return nil
}

func (c *cli) deploy(args []string) error {
	p, err := parseOpts(args, commonOpts, []opt{{long: "reboot", short: 'r'}, {long: "preview"},
		{long: "cache-only", short: 'C'}, {long: "download-only"}, {long: "skip-branch-check"},
		{long: "lock-finalization"}, {long: "disallow-downgrade"}, {long: "unchanged-exit-77"},
		{long: "register-driver", arg: true}, {long: "bypass-driver"}, {long: "ex-cliwrap", arg: true}})
	if err != nil {
		return usageErr{"deploy", err.Error()}
	}
	driver, registering := p.str("register-driver")
	if len(p.args) < 1 && !registering {
		return usageErr{"deploy", "REVISION must be specified"}
	}
	if p.has("reboot") || p.has("preview") {
		return errors.New("--reboot and --preview are not supported by the stand-in")
	}
	req := Request{Verb: "deploy", LockFinalization: p.has("lock-finalization"), RegisterDriver: driver,
		DisallowDowngrade: p.has("disallow-downgrade")}
	if len(p.args) > 0 {
		req.HasRevision = true
		rev := p.args[0]
		switch {
		case strings.HasPrefix(rev, "revision="):
			req.Revision = strings.TrimPrefix(rev, "revision=")
		case strings.HasPrefix(rev, "version="):
			return errors.New("deploy version= is not supported by the stand-in; use revision=CHECKSUM")
		default:
			req.Revision = rev
		}
		// A digest is checked by the daemon: for a container origin only.
		if req.Revision != "" && !isChecksum(req.Revision) && !isDigest(req.Revision) {
			return fmt.Errorf("Invalid checksum: %s", req.Revision)
		}
	}
	if !p.has("bypass-driver") {
		if err := c.driverCheck(); err != nil {
			return err
		}
	}
	ev, err := c.call(req)
	if err != nil {
		return err
	}
	return c.afterStage(ev, p.has("unchanged-exit-77"))
}

func (c *cli) rebase(args []string) error {
	p, err := parseOpts(args, commonOpts, []opt{{long: "branch", short: 'b', arg: true},
		{long: "remote", short: 'm', arg: true}, {long: "reboot", short: 'r'}, {long: "skip-purge"},
		{long: "cache-only", short: 'C'}, {long: "download-only"}, {long: "custom-origin-description", arg: true},
		{long: "custom-origin-url", arg: true}, {long: "experimental"}, {long: "disallow-downgrade"},
		{long: "lock-finalization"}, {long: "bypass-driver"}})
	if err != nil {
		return usageErr{"rebase", err.Error()}
	}
	if len(p.args) > 2 {
		return usageErr{"rebase", "Too many arguments"}
	}
	if !p.has("bypass-driver") {
		if err := c.driverCheck(); err != nil {
			return err
		}
	}
	req := Request{Verb: "rebase", LockFinalization: p.has("lock-finalization"), DisallowDowngrade: p.has("disallow-downgrade")}
	branch, hasBranch := p.str("branch")
	switch {
	case len(p.args) >= 1:
		req.Refspec = p.args[0]
	case hasBranch:
		req.Refspec = branch
	default:
		return usageErr{"rebase", "Must specify refspec, or -b branch or -m remote"}
	}
	if len(p.args) == 2 {
		req.Revision = strings.TrimPrefix(p.args[1], "revision=")
	}
	ev, err := c.call(req)
	if err != nil {
		return err
	}
	return c.afterStage(ev, false)
}

func (c *cli) finalizeDeployment(args []string) error {
	p, err := parseOpts(args, commonOpts, []opt{{long: "allow-missing-checksum"}, {long: "allow-unlocked"}})
	if err != nil {
		return usageErr{"finalize-deployment", err.Error()}
	}
	missing := p.has("allow-missing-checksum")
	switch {
	case len(p.args) > 1:
		return usageErr{"finalize-deployment", "Too many arguments passed"}
	case len(p.args) < 1 && !missing:
		return usageErr{"finalize-deployment", "Must provide expected CHECKSUM or --allow-missing-checksum"}
	case len(p.args) == 1 && missing:
		return usageErr{"finalize-deployment", "Cannot specify both CHECKSUM and --allow-missing-checksum"}
	}
	req := Request{Verb: "finalize", AllowMissing: missing, AllowUnlocked: p.has("allow-unlocked")}
	if len(p.args) == 1 {
		req.Checksum = p.args[0]
	}
	_, err = c.call(req)
	return err
}

func (c *cli) cleanup(args []string) error {
	p, err := parseOpts(args, commonOpts, []opt{{long: "base", short: 'b'}, {long: "pending", short: 'p'},
		{long: "rollback", short: 'r'}, {long: "repomd", short: 'm'}})
	if err != nil {
		return usageErr{"cleanup", err.Error()}
	}
	if len(p.args) > 0 || !(p.has("base") || p.has("pending") || p.has("rollback") || p.has("repomd")) {
		return usageErr{"cleanup", "cleanup: Too few or too many arguments"}
	}
	_, err = c.call(Request{Verb: "cleanup", CleanupPending: p.has("pending"), CleanupRollback: p.has("rollback")})
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

func (c *cli) startDaemon() error {
	log := slog.New(slog.NewTextHandler(c.stderr, nil))
	d, err := NewDaemon(c.cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return d.Serve(ctx)
}

func (c *cli) initSysroot(args []string) error {
	p, err := parseOpts(args, []opt{{long: "osname", arg: true}, {long: "remote", arg: true},
		{long: "url", arg: true}, {long: "per-object-fsync"}})
	if err != nil || len(p.args) != 1 {
		return usageErr{"standin-init --osname=OS --remote=NAME --url=file:///REPO [--per-object-fsync] REF", fmt.Sprint("bad arguments ", err)}
	}
	o := InitOptions{Ref: p.args[0], PerObjectFsync: p.has("per-object-fsync")}
	o.OSName, _ = p.str("osname")
	o.Remote, _ = p.str("remote")
	o.URL, _ = p.str("url")
	return Init(context.Background(), c.cfg, o, slog.New(slog.NewTextHandler(c.stderr, nil)))
}

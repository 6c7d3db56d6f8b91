package rpmostree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/update-agent/update-agent/agent/oplog"
)

// ExitUnchanged is rpm-ostree's exit code for "nothing changed"
// (upgrade --check, --unchanged-exit-77).
const ExitUnchanged = 77

// ClientID is sent as RPMOSTREE_CLIENT_ID so rpm-ostree's journal names us.
const ClientID = "update-agent"

// Client runs the rpm-ostree CLI.
type Client struct {
	// Path is the rpm-ostree binary; "rpm-ostree" (from PATH) when empty.
	Path string
	// Runner runs every command. Its Interrupt defaults to SIGINT: on
	// cancellation the CLI must be interrupted, never killed, so that the
	// daemon cancels the transaction (which would otherwise outlive us).
	Runner oplog.Runner
	// BypassDriver adds --bypass-driver to checks and staging: needed when
	// another driver is registered, or when staging runs in a transient unit
	// other than the one registered as driver.
	BypassDriver bool
}

func (c *Client) path() string {
	if c.Path == "" {
		return "rpm-ostree"
	}
	return c.Path
}

func (c *Client) runner() oplog.Runner {
	r := c.Runner
	r.Env = append(slices.Clone(r.Env), "RPMOSTREE_CLIENT_ID="+ClientID)
	if r.Interrupt == nil {
		r.Interrupt = syscall.SIGINT
	}
	r.Expected = append(slices.Clone(r.Expected), ExitUnchanged)
	return r
}

func (c *Client) run(ctx context.Context, desc string, args ...string) (oplog.Result, error) {
	res, err := c.runner().Run(ctx, desc, append([]string{c.path()}, args...)...)
	return res, classify(err)
}

// MaxStatusJSON bounds the read of `status --json` (~10-100 KB on a real
// host): past it Status fails rather than hold or parse a runaway output.
const MaxStatusJSON = 16 << 20

// Status runs `rpm-ostree status --json`.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	r := c.runner()
	r.MaxStdout, r.WholeStdout = MaxStatusJSON, true
	res, err := r.Run(ctx, "reading rpm-ostree status", c.path(), "status", "--json")
	if err = classify(err); err != nil {
		return nil, fmt.Errorf("reading rpm-ostree status: %w", err)
	}
	return ParseStatus(res.Stdout)
}

// Check runs `rpm-ostree upgrade --check`: exit 77 means no update. What an
// update shows depends on the origin (CheckResult).
func (c *Client) Check(ctx context.Context) (CheckResult, error) {
	args := []string{"upgrade", "--check"}
	if c.BypassDriver {
		args = append(args, "--bypass-driver")
	}
	r := c.runner()
	r.WholeStdout = true // the AvailableUpdate block is parsed
	res, err := r.Run(ctx, "checking for OS updates", append([]string{c.path()}, args...)...)
	err = classify(err)
	if oplog.ExitCode(err) == ExitUnchanged {
		return CheckResult{}, nil
	}
	if err != nil {
		return CheckResult{}, fmt.Errorf("checking for OS updates: %w", err)
	}
	return ParseCheck(res.Stdout), nil
}

// StageKind is how a target is staged.
type StageKind int

const (
	// StageUpgrade follows the booted deployment's origin to its newest commit.
	StageUpgrade StageKind = iota
	// StageDeploy stages one commit of the current origin (deploy revision=).
	StageDeploy
	// StageRebase switches the origin to Ref.
	StageRebase
)

// StageRequest says what to stage.
type StageRequest struct {
	Kind     StageKind
	Checksum string // StageDeploy
	Ref      string // StageRebase: a refspec or container image reference
	// Revision (rebase): the revision of Ref to deploy, a commit or an
	// image digest (`rpm-ostree rebase REFSPEC [REVISION]`), as zincati
	// rebases to an update graph's OCI release (src/rpm_ostree/cli_deploy.rs).
	Revision string
	// SkipBranchCheck (deploy): the commit need not be in the history of
	// the origin's ref, as zincati deploys the update graph's releases.
	SkipBranchCheck bool
	// AllowDowngrade lets the new tree be older than the booted one.
	// upgrade refuses an older tree by default, deploy and rebase allow
	// one: StageArgv makes all three refuse unless this is set.
	AllowDowngrade bool
}

func (r StageRequest) String() string {
	switch r.Kind {
	case StageDeploy:
		return "revision " + r.Checksum
	case StageRebase:
		if r.Revision != "" {
			return "rebase to " + r.Ref + " at " + r.Revision
		}
		return "rebase to " + r.Ref
	}
	return "upgrade"
}

// StageArgv is the full command line that stages req, always with
// --lock-finalization so no unplanned reboot applies it. upgrade and deploy
// exit 77 when nothing new was staged; a rebase prints "No change.". It is a
// pure function so the caller can run it inside a transient systemd unit.
func (c *Client) StageArgv(req StageRequest) []string {
	argv := []string{c.path()}
	switch req.Kind {
	case StageDeploy:
		argv = append(argv, "deploy", "--lock-finalization", "--unchanged-exit-77")
		if !req.AllowDowngrade {
			argv = append(argv, "--disallow-downgrade")
		}
		if strings.HasPrefix(req.Checksum, "sha256:") {
			// An image digest: rpm-ostree deploys it for a container
			// origin as it is (no revision= prefix, no branch).
			argv = append(argv, req.Checksum)
			break
		}
		if req.SkipBranchCheck {
			argv = append(argv, "--skip-branch-check")
		}
		argv = append(argv, "revision="+req.Checksum)
	case StageRebase:
		argv = append(argv, "rebase", "--lock-finalization")
		if !req.AllowDowngrade {
			argv = append(argv, "--disallow-downgrade")
		}
		argv = append(argv, req.Ref)
		if req.Revision != "" {
			argv = append(argv, req.Revision)
		}
	default:
		argv = append(argv, "upgrade", "--lock-finalization", "--unchanged-exit-77")
		if req.AllowDowngrade {
			argv = append(argv, "--allow-downgrade")
		}
	}
	if c.BypassDriver {
		argv = append(argv, "--bypass-driver")
	}
	return argv
}

// StageEnv is the environment StageArgv must run with (set it on the
// transient unit): the client id, plus the Runner's extra variables.
func (c *Client) StageEnv() []string { return c.runner().Env }

// Validate rejects requests StageArgv cannot express.
func (r StageRequest) Validate() error {
	switch r.Kind {
	case StageUpgrade:
		return nil
	case StageDeploy:
		if r.Checksum == "" {
			return errors.New("deploy without a checksum")
		}
		return nil
	case StageRebase:
		if r.Ref == "" {
			return errors.New("rebase without a ref")
		}
		return nil
	}
	return fmt.Errorf("unknown stage kind %d", r.Kind)
}

// StageResult says whether staging made a new deployment.
type StageResult struct {
	// Changed is false when rpm-ostree found nothing new ("No change." or
	// "No upgrade available."). An already-staged target is then NOT
	// re-locked: discard it (cleanup -p) and stage again.
	Changed bool
}

// StageOutcome interprets a finished staging command (run by Stage, or by a
// caller that ran StageArgv elsewhere): its exit code and stdout.
func StageOutcome(exitCode int, stdout []byte) (StageResult, bool) {
	switch exitCode {
	case 0:
		unchanged := bytes.Contains(stdout, []byte("No change.")) || bytes.Contains(stdout, []byte("No upgrade available."))
		return StageResult{Changed: !unchanged}, true
	case ExitUnchanged:
		return StageResult{Changed: false}, true
	}
	return StageResult{}, false
}

// Stage runs StageArgv(req) directly.
func (c *Client) Stage(ctx context.Context, req StageRequest) (StageResult, error) {
	if err := req.Validate(); err != nil {
		return StageResult{}, fmt.Errorf("staging %s: %w", req, err)
	}
	argv := c.StageArgv(req)
	res, err := c.runner().Run(ctx, "staging OS update", argv...)
	if r, ok := StageOutcome(res.ExitCode, res.Stdout); ok {
		return r, nil
	}
	return StageResult{}, fmt.Errorf("staging %s: %w", req, classify(err))
}

// Finalize runs `finalize-deployment <checksum>` for the staged deployment d:
// rpm-ostree unlocks it and reboots. Refusals come back as ErrNoStagedDeployment,
// ErrChecksumMismatch, ErrInhibited or ErrAlreadyUnlocked.
func (c *Client) Finalize(ctx context.Context, d Deployment) error {
	sum, err := d.FinalizeChecksum()
	if err != nil {
		return fmt.Errorf("finalizing deployment: %w", err)
	}
	if _, err := c.run(ctx, "finalizing staged deployment and rebooting", "finalize-deployment", sum); err != nil {
		return fmt.Errorf("finalizing deployment %s: %w", sum, err)
	}
	return nil
}

// Cleanup removes the pending (staged) deployment: `cleanup -p`.
func (c *Client) Cleanup(ctx context.Context) error {
	if _, err := c.run(ctx, "removing staged deployment", "cleanup", "-p"); err != nil {
		return fmt.Errorf("removing staged deployment: %w", err)
	}
	return nil
}

// Cancel cancels the running transaction, if any (`rpm-ostree cancel`).
func (c *Client) Cancel(ctx context.Context) error {
	if _, err := c.run(ctx, "cancelling rpm-ostree transaction", "cancel"); err != nil {
		return fmt.Errorf("cancelling rpm-ostree transaction: %w", err)
	}
	return nil
}

// RegisterDriver registers the calling systemd unit as the update driver
// (`deploy "" --register-driver=NAME`), so that manual upgrades are refused
// with a pointer to us. The registration lives in /run: redo it every boot.
func (c *Client) RegisterDriver(ctx context.Context, name string) error {
	if _, err := c.run(ctx, "registering as update driver", "deploy", "", "--register-driver="+name); err != nil {
		return fmt.Errorf("registering %s as update driver: %w", name, err)
	}
	return nil
}

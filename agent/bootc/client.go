package bootc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/update-agent/update-agent/agent/oplog"
)

// Client runs the bootc CLI.
type Client struct {
	// Path is the bootc binary; "bootc" (from PATH) when empty.
	Path string
	// Runner runs every command. Its Interrupt defaults to SIGTERM, what a
	// shutdown sends bootc (it has no daemon: the CLI does the writing and
	// holds the sysroot lock itself).
	Runner oplog.Runner
}

func (c *Client) path() string {
	if c.Path == "" {
		return "bootc"
	}
	return c.Path
}

func (c *Client) runner() oplog.Runner {
	r := c.Runner
	if r.Interrupt == nil {
		r.Interrupt = syscall.SIGTERM
	}
	return r
}

func (c *Client) run(ctx context.Context, desc string, args ...string) (oplog.Result, error) {
	res, err := c.runner().Run(ctx, desc, append([]string{c.path()}, args...)...)
	return res, classify(err)
}

// MaxStatusJSON bounds the read of `status --format=json` (a few KB on a
// real host).
const MaxStatusJSON = 4 << 20

// StatusArgv is the status command line: JSON, format version 1 (bootc's
// only one, asked for explicitly so that a future default does not change
// what is parsed).
func (c *Client) StatusArgv() []string {
	return []string{c.path(), "status", "--format=json", "--format-version=1"}
}

// Status runs `bootc status --format=json`.
func (c *Client) Status(ctx context.Context) (*Host, error) {
	r := c.runner()
	r.MaxStdout, r.WholeStdout = MaxStatusJSON, true
	res, err := r.Run(ctx, "reading bootc status", c.StatusArgv()...)
	if err = classify(err); err != nil {
		return nil, fmt.Errorf("reading bootc status: %w", err)
	}
	return ParseStatus(res.Stdout)
}

// Version runs `bootc --version`.
func (c *Client) Version(ctx context.Context) (Version, error) {
	res, err := c.run(ctx, "reading bootc version", "--version")
	if err != nil {
		return Version{}, fmt.Errorf("reading bootc version: %w", err)
	}
	return ParseVersion(string(res.Stdout))
}

// CheckResult is the outcome of `upgrade --check`.
type CheckResult struct {
	Available bool
	Version   string
	Digest    string // the update's manifest digest
}

// CheckArgv is the check command line: it fetches the manifest and config
// only (kilobytes) and records them as the booted entry's cachedUpdate.
func (c *Client) CheckArgv() []string { return []string{c.path(), "upgrade", "--check"} }

// Check runs `bootc upgrade --check`. It exits 0 either way; stdout says
// "Update available for: IMAGE" (with "  Version:" and "  Digest:" lines)
// or "No changes in: IMAGE". "No changes" also means the image is already
// in the host's store (e.g. downloaded, then lost with an unplanned
// reboot): the caller looks at status for that.
func (c *Client) Check(ctx context.Context) (CheckResult, error) {
	r := c.runner()
	r.WholeStdout = true
	res, err := r.Run(ctx, "checking for OS updates", c.CheckArgv()...)
	if err = classify(err); err != nil {
		return CheckResult{}, fmt.Errorf("checking for OS updates: %w", err)
	}
	cr, err := ParseCheck(res.Stdout)
	if err != nil {
		return CheckResult{}, fmt.Errorf("checking for OS updates: %w", err)
	}
	return cr, nil
}

// ParseCheck reads `upgrade --check`'s stdout.
func ParseCheck(out []byte) (CheckResult, error) {
	var r CheckResult
	seen := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "No changes in"):
			return CheckResult{}, nil
		case strings.HasPrefix(line, "Update available for"):
			r.Available, seen = true, true
		case seen && strings.HasPrefix(line, "  Version: "):
			r.Version = strings.TrimSpace(strings.TrimPrefix(line, "  Version: "))
		case seen && strings.HasPrefix(line, "  Digest: "):
			r.Digest = strings.TrimSpace(strings.TrimPrefix(line, "  Digest: "))
		}
	}
	if !seen {
		return CheckResult{}, fmt.Errorf("unexpected bootc upgrade --check output: %q", strings.TrimSpace(string(out)))
	}
	if r.Digest == "" {
		return CheckResult{}, errors.New("bootc reported an update without its digest")
	}
	return r, nil
}

// StageArgv stages the booted image's newest version finalization-locked:
// `upgrade --download-only` (an unplanned reboot does not apply it; bootc
// >= 1.12). Staging the digest already staged re-locks it ("Image
// downloaded, but will not be applied on reboot"). --quiet: no progress
// bars in the staging unit's journal. A pure function so that the caller
// can run it inside a transient systemd unit.
func (c *Client) StageArgv() []string {
	return []string{c.path(), "upgrade", "--download-only", "--quiet"}
}

// ApplyArgv unlocks the downloaded staged deployment, without fetching
// anything, and reboots into it.
func (c *Client) ApplyArgv() []string {
	return append([]string{c.path()}, ApplyArgs...)
}

// ErrApplyRunning: `upgrade --apply` was still running after the wait. bootc
// never returns from a successful --apply: having started the reboot it
// waits to be stopped by it. The caller reads status to tell a requested
// reboot (staged, no longer download-only) from a stuck command.
var ErrApplyRunning = errors.New("bootc upgrade --apply still running (waiting for the reboot it started)")

// Apply runs ApplyArgv, giving it wait to fail before taking it for a
// reboot under way (ErrApplyRunning). Refusals: ErrNoStagedDeployment,
// ErrRebootFailed (unlocked, not rebooting).
func (c *Client) Apply(ctx context.Context, wait time.Duration) error {
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err := c.run(actx, "applying the downloaded update and rebooting", ApplyArgs...)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		return fmt.Errorf("applying the downloaded update: %w after %s", ErrApplyRunning, wait)
	}
	if err != nil {
		return fmt.Errorf("applying the downloaded update: %w", err)
	}
	return nil
}

// ApplyArgs are ApplyArgv's arguments.
var ApplyArgs = []string{"upgrade", "--from-downloaded", "--apply"}

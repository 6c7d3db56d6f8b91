package bootc

import (
	"errors"

	"github.com/update-agent/update-agent/agent/oplog"
)

// Typed refusals of bootc, recognized from its stderr ("error: <context>:
// <message>", exit 1). The returned error wraps both the sentinel and the
// *oplog.Error, so errors.Is and errors.As both work and argv, exit code
// and stderr stay in the message.
var (
	// ErrNoStagedDeployment: --from-downloaded found nothing staged.
	ErrNoStagedDeployment = errors.New("no staged deployment")
	// ErrRebootFailed: the staged deployment was unlocked, but starting
	// the reboot failed: it will be applied by the next reboot.
	ErrRebootFailed = errors.New("bootc could not initiate the reboot")
	// ErrIncompatible: the deployment has local rpm-ostree changes bootc
	// refuses to upgrade.
	ErrIncompatible = errors.New("deployment has local rpm-ostree modifications")
	// ErrNoImage: the host follows no image (not bootc-managed).
	ErrNoImage = errors.New("no image source specified")
	// ErrUsage: the installed bootc does not know a flag (clap exits 2).
	ErrUsage = errors.New("bootc rejected the command line")
)

// refusals maps stderr fragments, as upstream words them, to sentinels.
var refusals = []oplog.Refusal{
	{Fragment: "No staged deployment found", Err: ErrNoStagedDeployment},
	{Fragment: "Initiating reboot", Err: ErrRebootFailed},
	{Fragment: "local rpm-ostree modifications", Err: ErrIncompatible},
	{Fragment: "No image source specified", Err: ErrNoImage},
}

// exitUsage is clap's exit code for a command line it rejects.
const exitUsage = 2

// classify adds the sentinel matching a failed command's stderr, if any.
func classify(err error) error {
	if s := oplog.Refused(err, refusals); s != nil {
		return oplog.Marked(s, err)
	}
	var oe *oplog.Error
	if errors.As(err, &oe) && oe.ExitCode == exitUsage {
		return oplog.Marked(ErrUsage, err)
	}
	return err
}

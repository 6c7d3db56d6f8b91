package bootc

import (
	"errors"
	"strings"

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
var refusals = []struct {
	fragment string
	err      error
}{
	{"No staged deployment found", ErrNoStagedDeployment},
	{"Initiating reboot", ErrRebootFailed},
	{"local rpm-ostree modifications", ErrIncompatible},
	{"No image source specified", ErrNoImage},
}

// exitUsage is clap's exit code for a command line it rejects.
const exitUsage = 2

// classify adds the sentinel matching a failed command's stderr, if any.
func classify(err error) error {
	var oe *oplog.Error
	if !errors.As(err, &oe) {
		return err
	}
	for _, r := range refusals {
		if strings.Contains(oe.Stderr, r.fragment) {
			return marked{r.err, err}
		}
	}
	if oe.ExitCode == exitUsage {
		return marked{ErrUsage, err}
	}
	return err
}

// marked matches sentinel for errors.Is while its message stays err's (the
// stderr in it says the refusal in bootc's words).
type marked struct{ sentinel, err error }

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{m.sentinel, m.err} }

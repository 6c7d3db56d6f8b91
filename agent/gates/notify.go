package gates

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/update-agent/update-agent/agent/oplog"
)

// Notifier tells the people on the host that a reboot is coming: a line in
// the message of the day (under /run, so it is gone after the reboot) and a
// wall message. It does not wait: the engine waits for logged-in users
// (reboot.logged_in_delay) after the notice and looks at the gates, quorum
// and its slot again only then, so users are warned during the delay and
// the last checks are not made stale by it.
type Notifier struct {
	// MOTDFile is written before the reboot ("" = none); pam_motd shows
	// /run/motd.d/*.
	MOTDFile string
	// Wall is the wall binary ("" = none); the message goes on stdin, so it
	// is never taken for a file name.
	Wall   string
	Runner oplog.Runner
	// Users counts the interactive sessions (logind); nil = none.
	Users func(ctx context.Context) (int, error)
}

// Message is what users read; delay is the logged-in delay (0: none).
func Message(node, target string, delay time.Duration) string {
	msg := fmt.Sprintf("update-agent: %s reboots shortly to apply update %s (coordinated through the etcd reboot lock).", node, target)
	if delay > 0 {
		msg += fmt.Sprintf(" It waits up to %s for logged-in users to log out.", delay)
	}
	return msg + "\n"
}

// Announce writes the motd line and sends the wall message, at once.
// Failing to tell is logged by the caller; it does not hold the reboot.
func (n Notifier) Announce(ctx context.Context, msg string) error {
	var errs []error
	if n.MOTDFile != "" {
		if err := os.MkdirAll(filepath.Dir(n.MOTDFile), 0o755); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", n.MOTDFile, err))
		} else if err := os.WriteFile(n.MOTDFile, []byte(msg), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", n.MOTDFile, err))
		}
	}
	if n.Wall != "" {
		if _, err := n.Runner.RunInput(ctx, "telling logged-in users", []byte(msg), n.Wall); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// LoggedIn counts the interactive sessions; 0 when none are counted.
func (n Notifier) LoggedIn(ctx context.Context) (int, error) {
	if n.Users == nil {
		return 0, nil
	}
	c, err := n.Users(ctx)
	if err != nil {
		return 0, fmt.Errorf("counting logged-in sessions: %w", err)
	}
	return c, nil
}

// Clear removes the motd line (after the reboot /run is empty anyway; this
// covers a reboot that did not happen).
func (n Notifier) Clear() error {
	if n.MOTDFile == "" {
		return nil
	}
	if err := os.Remove(n.MOTDFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

package gates

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/update-agent/update-agent/agent/oplog"
)

// Notifier tells the people on the host that a reboot is coming: a line in
// the message of the day (under /run, so it is gone after the reboot) and a
// wall message; with users logged in it first waits up to LoggedInDelay,
// as zincati does.
type Notifier struct {
	// MOTDFile is written before the reboot ("" = none); pam_motd shows
	// /run/motd.d/*.
	MOTDFile string
	// Wall is the wall binary ("" = none); the message goes on stdin, so it
	// is never taken for a file name.
	Wall   string
	Runner oplog.Runner
	// Users counts the interactive sessions (logind); nil = none.
	Users         func(ctx context.Context) (int, error)
	LoggedInDelay time.Duration
	Clock         clockwork.Clock
	// Poll is how often Users is asked while waiting (default 10 s).
	Poll time.Duration
}

// Message is what users read.
func Message(node, target string) string {
	return fmt.Sprintf("update-agent: %s reboots shortly to apply update %s (coordinated through the etcd reboot lock).\n", node, target)
}

// Announce writes the motd line, waits for logged-in users up to
// LoggedInDelay, and sends the wall message. Only a cancelled ctx stops it:
// failing to tell is logged by the caller, it does not hold the reboot.
func (n Notifier) Announce(ctx context.Context, msg string) error {
	var errs []error
	if n.MOTDFile != "" {
		if err := os.MkdirAll(filepath.Dir(n.MOTDFile), 0o755); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", n.MOTDFile, err))
		} else if err := os.WriteFile(n.MOTDFile, []byte(msg), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", n.MOTDFile, err))
		}
	}
	if err := n.waitForUsers(ctx); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if n.Wall != "" {
		if _, err := n.Runner.RunInput(ctx, "telling logged-in users", []byte(msg), n.Wall); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

func (n Notifier) waitForUsers(ctx context.Context) error {
	if n.Users == nil || n.LoggedInDelay <= 0 {
		return nil
	}
	clock, poll := n.Clock, n.Poll
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	if poll <= 0 {
		poll = 10 * time.Second
	}
	deadline := clock.Now().Add(n.LoggedInDelay)
	for {
		users, err := n.Users(ctx)
		if err == nil && users == 0 {
			return nil
		}
		if !clock.Now().Before(deadline) {
			return nil // waited long enough: zincati reboots too
		}
		log := n.Runner.Log
		if log == nil {
			log = slog.Default()
		}
		log.Info("users are logged in; waiting before the reboot",
			"sessions", users, "until", deadline, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clock.After(min(poll, deadline.Sub(clock.Now()))):
		}
	}
}

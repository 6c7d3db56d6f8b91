// Package sdnotify tells systemd about the agent's life: READY once it is
// set up, STATUS= text saying what it waits for, watchdog pings from the main
// loop, STOPPING on shutdown. Outside systemd ($NOTIFY_SOCKET unset) every
// call is a no-op.
package sdnotify

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier sends sd_notify(3) messages.
type Notifier struct{}

func (Notifier) send(state string) error {
	if _, err := daemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("notifying systemd (%q): %w", state, err)
	}
	return nil
}

// Ready tells systemd that start-up finished (Type=notify).
func (n Notifier) Ready(status string) error { return n.send("READY=1\nSTATUS=" + status) }

// Status sets the one-line status `systemctl status` shows.
func (n Notifier) Status(status string) error { return n.send("STATUS=" + status) }

// Stopping tells systemd that shutdown began.
func (n Notifier) Stopping() error { return n.send("STOPPING=1") }

// Watchdog sends one keep-alive ping.
func (n Notifier) Watchdog() error { return n.send("WATCHDOG=1") }

// WatchdogInterval returns how often to ping: half of WatchdogSec, or 0 when
// systemd does not watch this process.
func WatchdogInterval() time.Duration {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil || d <= 0 {
		return 0
	}
	return d / 2
}

// PingWhile pings the watchdog every interval while alive() reports the main
// loop made progress recently; a stuck loop stops the pings and systemd
// restarts the agent. It returns when ctx ends.
func (n Notifier) PingWhile(ctx context.Context, interval time.Duration, alive func() bool) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if alive() {
				_ = n.Watchdog()
			}
		}
	}
}

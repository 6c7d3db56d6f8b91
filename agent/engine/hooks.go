package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"time"

	"github.com/update-agent/update-agent/agent/oplog"
)

// Hook is one pre-reboot command (drain, stop kubelet...), run by argv.
type Hook struct {
	Name    string
	Argv    []string
	Timeout time.Duration
}

// HookRunner runs the pre-reboot hooks in order, each under its timeout,
// through oplog; their output goes into the journal. The first failure
// stops the rest.
type HookRunner struct {
	Hooks []Hook
	Log   *slog.Logger
	// Runner runs the commands; its Interrupt defaults to SIGTERM so a hook
	// that times out can clean up before it is killed.
	Runner oplog.Runner
}

// Run runs every hook; it returns the first failure, naming the hook.
func (h HookRunner) Run(ctx context.Context) error {
	r := h.Runner
	if r.Interrupt == nil {
		r.Interrupt = syscall.SIGTERM
		if r.WaitDelay == 0 {
			r.WaitDelay = 10 * time.Second
		}
	}
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	if r.Log == nil {
		r.Log = log
	}
	for _, hk := range h.Hooks {
		hctx, cancel := ctx, context.CancelFunc(func() {})
		if hk.Timeout > 0 {
			hctx, cancel = context.WithTimeout(ctx, hk.Timeout)
		}
		res, err := r.Run(hctx, "pre-reboot hook "+hk.Name, hk.Argv...)
		timedOut := errors.Is(hctx.Err(), context.DeadlineExceeded)
		cancel()
		logOutput(log, hk.Name, "stdout", res.Stdout, res.StdoutDropped)
		logOutput(log, hk.Name, "stderr", res.Stderr, 0)
		if err != nil {
			if timedOut {
				return fmt.Errorf("pre-reboot hook %s: timed out after %s: %w", hk.Name, hk.Timeout, err)
			}
			return fmt.Errorf("pre-reboot hook %s: %w", hk.Name, err)
		}
	}
	return nil
}

// logOutput puts the end of a hook's output into the journal, one entry per
// line so that `journalctl -u update-agent` reads like the hook's own
// output; dropped is what oplog did not keep before it.
func logOutput(log *slog.Logger, hook, stream string, b []byte, dropped int64) {
	const maxLines = 200 // a chatty drain must not flood the journal; its end says how it went
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return
	}
	if skip := len(lines) - maxLines; skip > 0 || dropped > 0 {
		lines = lines[max(skip, 0):]
		log.Info("hook output: only its last lines follow", "hook", hook, "stream", stream,
			"lines_left_out", max(skip, 0), "bytes_dropped_before", dropped)
	}
	for _, l := range lines {
		log.Info(l, "hook", hook, "stream", stream)
	}
}

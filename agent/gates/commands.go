package gates

import (
	"context"
	"errors"
	"time"

	"github.com/update-agent/update-agent/agent/oplog"
)

// Command is an operator's gate ([[gates.commands]]): exit 0 lets the node
// go, anything else (or no answer within Timeout) holds it.
type Command struct {
	Argv    []string
	Timeout time.Duration
}

// RunCommands runs each command by argv, without a shell, as a logged
// operation.
func RunCommands(ctx context.Context, r oplog.Runner, cmds []Command) []CommandResult {
	out := make([]CommandResult, 0, len(cmds))
	for _, c := range cmds {
		cctx, cancel := context.WithTimeout(ctx, c.Timeout)
		res, err := r.Run(cctx, "reboot gate command", c.Argv...)
		timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded)
		cancel()
		out = append(out, CommandResult{Argv: c.Argv, ExitCode: res.ExitCode, TimedOut: timedOut, Err: err})
	}
	return out
}

// Package oplog runs external commands as logged operations: argv is logged
// before the command starts, the outcome after it ends, and a failure carries
// argv, exit code and stderr so the journal alone explains what went wrong.
// Commands run by argv, never through a shell.
package oplog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Runner runs commands. The zero value logs to slog.Default().
type Runner struct {
	Log *slog.Logger
	// Env is added to the agent's own environment for every command.
	Env []string
	// Interrupt is sent on context cancellation before the command is killed
	// after WaitDelay; rpm-ostree needs SIGINT so its daemon cancels the
	// transaction (SIGKILL would leave the transaction running).
	Interrupt os.Signal
	WaitDelay time.Duration
	// Expected lists non-zero exit codes that are answers, not failures
	// (rpm-ostree's 77, "no update"): they are logged at info level but
	// still returned as *Error so the caller decides what they mean.
	Expected []int
	// MaxStdout bounds the stdout kept (0: DefaultStdoutTail, or
	// DefaultMaxStdout with WholeStdout). Past it the last MaxStdout bytes
	// are kept and the command is not failed for it (Result.StdoutDropped
	// says how much went), unless WholeStdout. Stderr keeps its head and
	// tail.
	MaxStdout int
	// WholeStdout is for a caller that parses all of stdout (a JSON
	// document): past MaxStdout the command fails with ErrStdoutTooLong,
	// naming the bound, rather than hand over a cut document.
	WholeStdout bool
	// Quiet logs the run at debug level, failures too: a read polled
	// every minute whose caller reports what went wrong.
	Quiet bool
}

// Result is what a finished command produced.
type Result struct {
	Argv     []string
	ExitCode int
	Stdout   []byte
	// StdoutDropped counts the bytes printed before the kept Stdout (a
	// command that printed more than MaxStdout, without WholeStdout).
	StdoutDropped int64
	Stderr        []byte
	Duration      time.Duration
}

// Error is returned for a command that could not start or exited non-zero.
type Error struct {
	Argv []string
	// -1 when the command did not start, was killed by a signal or its
	// stdout was cut (ErrStdoutTooLong)
	ExitCode int
	Stderr   string
	// Stdout is the end of what the command printed (a few KB): a
	// command silent on stderr (many scripts) says why it failed there.
	Stdout string
	Err    error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("running %s", quote(e.Argv))
	if e.ExitCode >= 0 {
		msg += fmt.Sprintf(": exit status %d", e.ExitCode)
	} else if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	} else if s := strings.TrimSpace(e.Stdout); s != "" {
		msg += ": output ends: " + s
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode returns the exit code carried by err, or -1 when err is not an
// *Error from a command that exited.
func ExitCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.ExitCode
	}
	return -1
}

func (r Runner) logger() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// Run runs argv and waits for it. desc names the operation in the log
// ("checking for updates"). A non-zero exit returns the Result and an *Error.
func (r Runner) Run(ctx context.Context, desc string, argv ...string) (Result, error) {
	return r.RunInput(ctx, desc, nil, argv...)
}

// RunInput is Run with stdin fed from in.
func (r Runner) RunInput(ctx context.Context, desc string, in []byte, argv ...string) (Result, error) {
	res := Result{Argv: argv, ExitCode: -1}
	if len(argv) == 0 {
		return res, &Error{Argv: argv, ExitCode: -1, Err: errors.New("empty command")}
	}
	log := r.logger().With("op", desc, "argv", argv)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if len(r.Env) > 0 {
		cmd.Env = append(os.Environ(), r.Env...)
	}
	if r.Interrupt != nil {
		sig := r.Interrupt
		cmd.Cancel = func() error { return cmd.Process.Signal(sig) }
		cmd.WaitDelay = r.WaitDelay
		if cmd.WaitDelay == 0 {
			cmd.WaitDelay = 30 * time.Second
		}
	}
	if in != nil {
		cmd.Stdin = bytes.NewReader(in)
	}
	whole, last := &capped{max: r.MaxStdout}, &tail{max: r.MaxStdout}
	stderr := newHeadTail()
	cmd.Stdout, cmd.Stderr = last, stderr
	if r.WholeStdout {
		cmd.Stdout = whole
		if whole.max <= 0 {
			whole.max = DefaultMaxStdout
		}
	} else if last.max <= 0 {
		last.max = DefaultStdoutTail
	}
	done := slog.LevelInfo
	if r.Quiet {
		done = slog.LevelDebug
	}
	log.Log(ctx, done, "starting operation")
	start := time.Now()
	err := cmd.Run()
	res.Duration = time.Since(start)
	res.Stderr = []byte(stderr.String())
	if r.WholeStdout {
		res.Stdout = whole.buf.Bytes()
	} else {
		res.Stdout, res.StdoutDropped = last.Bytes(), last.Dropped()
	}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = -1
		}
	}
	if err == nil && whole.over > 0 {
		err = fmt.Errorf("%w: %d bytes past the bound of %d", ErrStdoutTooLong, whole.over, whole.max)
		res.ExitCode = -1
	}
	var dropped []any
	if res.StdoutDropped > 0 {
		dropped = []any{"stdout_dropped_bytes", res.StdoutDropped}
	}
	if err != nil {
		e := &Error{Argv: argv, ExitCode: res.ExitCode, Stderr: stderr.String(), Err: err,
			Stdout: string(res.Stdout[len(res.Stdout)-min(len(res.Stdout), errorStdoutTail):])}
		if ctx.Err() != nil {
			e.Err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		level := slog.LevelWarn
		if ctx.Err() == nil && slices.Contains(r.Expected, res.ExitCode) {
			level = slog.LevelInfo
		}
		if r.Quiet {
			level = slog.LevelDebug
		}
		log.Log(ctx, level, "operation failed", append([]any{"exit_code", res.ExitCode, "duration", res.Duration,
			"stderr", strings.TrimSpace(stderr.String())}, dropped...)...)
		return res, e
	}
	log.Log(ctx, done, "operation done", append([]any{"duration", res.Duration}, dropped...)...)
	return res, nil
}

func quote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`") {
			q[i] = fmt.Sprintf("%q", a)
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}

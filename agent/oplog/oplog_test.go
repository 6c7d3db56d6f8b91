package oplog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunSuccessAndFailure(t *testing.T) {
	var buf bytes.Buffer
	r := Runner{Log: slog.New(slog.NewTextHandler(&buf, nil)), Env: []string{"OPLOG_TEST=hello"}}
	res, err := r.Run(context.Background(), "echo env", "sh", "-c", `echo "$OPLOG_TEST"`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "hello" {
		t.Errorf("stdout = %q, want hello (Env not passed)", got)
	}
	_, err = r.Run(context.Background(), "failing", "sh", "-c", "echo oops >&2; exit 3")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *Error", err)
	}
	if e.ExitCode != 3 || ExitCode(err) != 3 {
		t.Errorf("exit code = %d, want 3", e.ExitCode)
	}
	for _, want := range []string{"sh -c", "exit status 3", "oops"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if !strings.Contains(buf.String(), "operation failed") || !strings.Contains(buf.String(), "op=failing") {
		t.Errorf("log lacks the failed operation:\n%s", buf.String())
	}
}

func TestRunNotFound(t *testing.T) {
	_, err := Runner{}.Run(context.Background(), "missing", "/nonexistent/binary")
	if err == nil || ExitCode(err) != -1 || !strings.Contains(err.Error(), "/nonexistent/binary") {
		t.Fatalf("err = %v, want a start failure naming the binary", err)
	}
}

func TestCancelSendsInterrupt(t *testing.T) {
	// The child traps SIGINT and exits 42: proves SIGINT, not SIGKILL, was sent.
	ctx, cancel := context.WithCancel(context.Background())
	r := Runner{Interrupt: os.Interrupt, WaitDelay: 5 * time.Second}
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	res, err := r.Run(ctx, "trap", "sh", "-c", "trap 'exit 42' INT; while :; do sleep 0.05; done")
	if err == nil {
		t.Fatal("want an error after cancel")
	}
	if res.ExitCode != 42 {
		t.Errorf("exit code = %d, want 42 (SIGINT handler ran)", res.ExitCode)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want it to wrap context.Canceled", err)
	}
}

func TestExpectedExitLoggedAtInfo(t *testing.T) {
	var buf bytes.Buffer
	r := Runner{Log: slog.New(slog.NewTextHandler(&buf, nil)), Expected: []int{77}}
	_, err := r.Run(context.Background(), "check", "sh", "-c", "exit 77")
	if ExitCode(err) != 77 {
		t.Fatalf("err = %v, want exit 77 returned", err)
	}
	if strings.Contains(buf.String(), "level=WARN") {
		t.Errorf("expected exit code logged as a warning:\n%s", buf.String())
	}
	buf.Reset()
	r.Run(context.Background(), "check", "sh", "-c", "exit 1")
	if !strings.Contains(buf.String(), "level=WARN") {
		t.Errorf("unexpected exit code not logged as a warning:\n%s", buf.String())
	}
}

// TestOutputBounded: stdout past MaxStdout fails the command with
// ErrStdoutTooLong (a cut document must not be parsed) while the command
// still runs to its end; a long stderr keeps its head and tail only.
func TestOutputBounded(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := Runner{Log: quiet, MaxStdout: 1000}
	res, err := r.Run(context.Background(), "at the cap", "sh", "-c", "head -c 1000 /dev/zero")
	if err != nil || len(res.Stdout) != 1000 {
		t.Fatalf("at the cap: %d bytes, %v", len(res.Stdout), err)
	}
	done := filepath.Join(t.TempDir(), "done")
	res, err = r.Run(context.Background(), "past the cap", "sh", "-c", "head -c 5000 /dev/zero && touch "+done)
	if !errors.Is(err, ErrStdoutTooLong) || ExitCode(err) != -1 || len(res.Stdout) != 1000 ||
		!strings.Contains(err.Error(), "stdout too long: 4000 bytes past the first 1000") {
		t.Fatalf("past the cap: %d bytes kept, exit %d, %v", len(res.Stdout), ExitCode(err), err)
	}
	if _, err := os.Stat(done); err != nil {
		t.Errorf("the command did not run to its end: %v", err)
	}

	// 1 MiB of stderr: the first and last lines survive, the middle not.
	script := `echo FIRST >&2; i=0; while [ $i -lt 16384 ]; do echo "middle line $i of the noise, padded to 64 bytes......" >&2; i=$((i+1)); done; echo LAST >&2; exit 4`
	_, err = Runner{Log: quiet}.Run(context.Background(), "noisy", "sh", "-c", script)
	var e *Error
	if !errors.As(err, &e) || e.ExitCode != 4 {
		t.Fatalf("noisy: %v", err)
	}
	if len(e.Stderr) > stderrHead+stderrTail+100 {
		t.Errorf("stderr kept %d bytes, want at most %d", len(e.Stderr), stderrHead+stderrTail+100)
	}
	for _, want := range []string{"FIRST\n", "\nLAST", "bytes left out ...]", "middle line 16383 "} {
		if !strings.Contains(e.Stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if strings.Contains(e.Stderr, "middle line 8000 ") {
		t.Error("stderr kept the middle")
	}
}

func TestHeadTailShort(t *testing.T) {
	h := newHeadTail()
	for _, s := range []string{"a", "b\n", "c"} {
		h.Write([]byte(s))
	}
	if h.String() != "ab\nc" {
		t.Errorf("%q", h.String())
	}
}

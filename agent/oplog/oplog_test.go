package oplog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
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

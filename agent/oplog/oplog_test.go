package oplog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// TestStdoutBounds: a command printing more than the bound. A caller that
// parses the whole stdout (WholeStdout) gets ErrStdoutTooLong naming the
// bound (a cut document must not be parsed); any other command is never
// failed for it and keeps the tail, which a failure's error quotes when
// stderr says nothing. Either way the command runs to its end.
func TestStdoutBounds(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const big = 3 << 20 // past DefaultStdoutTail
	cases := []struct {
		name      string
		r         Runner
		script    string // prints, then touches $1
		wantErr   string // "" = success
		wantTail  string // what Stdout ends with
		wantLen   int
		wantDrops int64
	}{
		{"whole, at the bound", Runner{MaxStdout: 1000, WholeStdout: true}, "head -c 1000 /dev/zero",
			"", "", 1000, 0},
		{"whole, past the bound", Runner{MaxStdout: 1000, WholeStdout: true}, "head -c 5000 /dev/zero",
			"stdout too long: 4000 bytes past the bound of 1000", "", 1000, 0},
		{"tail, past the bound", Runner{MaxStdout: 1000}, "head -c 5000 /dev/zero; echo LAST",
			"", "\x00LAST\n", 1000, 4005},
		{"tail, default bound, many small writes", Runner{},
			fmt.Sprintf("yes | head -c %d; echo LAST", big), "", "y\nLAST\n", DefaultStdoutTail, big + 5 - DefaultStdoutTail},
		{"tail, failing and silent on stderr", Runner{MaxStdout: 1000}, "head -c 5000 /dev/zero; echo 'drain: pod x refused eviction'; exit 3",
			"exit status 3: output ends: ", "refused eviction\n", 1000, 4030},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done := filepath.Join(t.TempDir(), "done")
			r := c.r
			r.Log = quiet
			res, err := r.Run(context.Background(), c.name, "sh", "-c", "("+c.script+"); rc=$?; touch \"$0\"; exit $rc", done)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			}
			if c.wantErr != "" && strings.Contains(c.name, "whole") && (!errors.Is(err, ErrStdoutTooLong) || ExitCode(err) != -1) {
				t.Errorf("err = %v (exit %d), want ErrStdoutTooLong and exit -1", err, ExitCode(err))
			}
			if len(res.Stdout) != c.wantLen || !strings.HasSuffix(string(res.Stdout), c.wantTail) || res.StdoutDropped != c.wantDrops {
				t.Errorf("kept %d bytes ending %q, dropped %d; want %d ending %q, dropped %d", len(res.Stdout),
					res.Stdout[max(len(res.Stdout)-20, 0):], res.StdoutDropped, c.wantLen, c.wantTail, c.wantDrops)
			}
			if strings.Contains(c.name, "failing") && !strings.Contains(err.Error(), "pod x refused eviction") {
				t.Errorf("the error does not quote the output's end: %v", err)
			}
			if _, err := os.Stat(done); err != nil {
				t.Errorf("the command did not run to its end: %v", err)
			}
		})
	}
}

// TestStderrBounded: 1 MiB of stderr keeps its first and last lines, not
// the middle.
func TestStderrBounded(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	script := `echo FIRST >&2; i=0; while [ $i -lt 16384 ]; do echo "middle line $i of the noise, padded to 64 bytes......" >&2; i=$((i+1)); done; echo LAST >&2; exit 4`
	_, err := Runner{Log: quiet}.Run(context.Background(), "noisy", "sh", "-c", script)
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

// TestTailWrites: the tail buffer against a reference, over writes of every
// size around its bound.
func TestTailWrites(t *testing.T) {
	var all []byte
	tl := &tail{max: 7}
	for i, n := range []int{1, 3, 7, 0, 8, 2, 13, 6, 1, 1, 20, 5} {
		p := bytes.Repeat([]byte{byte('a' + i)}, n)
		all = append(all, p...)
		tl.Write(p)
		want := all[max(len(all)-7, 0):]
		if !bytes.Equal(tl.Bytes(), want) || tl.Dropped() != int64(len(all)-len(want)) {
			t.Fatalf("after write %d: %q dropped %d, want %q dropped %d", i, tl.Bytes(), tl.Dropped(), want, len(all)-len(want))
		}
		if cap(tl.buf) > 64 {
			t.Fatalf("buffer grew to %d", cap(tl.buf))
		}
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

package engine

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestHookRunner(t *testing.T) {
	for _, bin := range []string{"echo", "false", "sleep"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed", bin)
		}
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ok := Hook{Name: "drain", Argv: []string{"echo", "node drained"}, Timeout: 5 * time.Second}
	fail := Hook{Name: "stop-kubelet", Argv: []string{"false"}, Timeout: 5 * time.Second}
	slow := Hook{Name: "slow", Argv: []string{"sleep", "30"}, Timeout: 100 * time.Millisecond}
	never := Hook{Name: "never", Argv: []string{"echo", "must not run"}}

	if err := (HookRunner{Hooks: []Hook{ok}, Log: log}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "node drained") || !strings.Contains(buf.String(), "hook=drain") {
		t.Errorf("hook output not logged:\n%s", buf.String())
	}

	buf.Reset()
	err := HookRunner{Hooks: []Hook{ok, fail, never}, Log: log}.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "pre-reboot hook stop-kubelet") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(buf.String(), "must not run") {
		t.Error("a hook ran after a failed one")
	}

	start := time.Now()
	err = HookRunner{Hooks: []Hook{slow}, Log: log}.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "timed out after 100ms") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

// TestChattyHookSucceeds: a drain printing more than oplog ever kept (17 MiB,
// past the old 16 MiB cap and DefaultStdoutTail) is not failed for it; the journal gets the end
// of its output, which says how it went.
func TestChattyHookSucceeds(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	chatty := Hook{Name: "drain", Argv: []string{"sh", "-c", "yes 'evicting pod' | head -c 17825795; echo 'node drained'"},
		Timeout: time.Minute}
	if err := (HookRunner{Hooks: []Hook{chatty}, Log: log}).Run(context.Background()); err != nil {
		t.Fatalf("a chatty hook failed: %v", err)
	}
	out := buf.String()
	if !strings.Contains(out, "msg=\"node drained\" hook=drain stream=stdout") || !strings.Contains(out, "only its last lines follow") {
		t.Errorf("the end of the hook's output is not logged:\n%s", out[max(len(out)-600, 0):])
	}
	if n := strings.Count(out, "\n"); n > 250 {
		t.Errorf("%d log lines for one hook", n)
	}
}

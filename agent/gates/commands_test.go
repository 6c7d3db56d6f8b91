package gates

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/oplog"
)

func TestRunCommands(t *testing.T) {
	res := RunCommands(context.Background(), oplog.Runner{}, []Command{
		{Argv: []string{"/bin/true"}, Timeout: 5 * time.Second},
		{Argv: []string{"/bin/sh", "-c", "echo drained nodes pending >&2; exit 3"}, Timeout: 5 * time.Second},
		{Argv: []string{"/bin/sleep", "30"}, Timeout: 100 * time.Millisecond},
		{Argv: []string{"/nonexistent/gate"}, Timeout: 5 * time.Second},
	})
	if len(res) != 4 {
		t.Fatalf("want 4 results, got %d", len(res))
	}
	if res[0].Err != nil || res[0].TimedOut {
		t.Fatalf("exit 0: %+v", res[0])
	}
	if res[1].ExitCode != 3 || !strings.Contains(res[1].Err.Error(), "drained nodes pending") {
		t.Fatalf("exit 3 with stderr: %+v", res[1])
	}
	if !res[2].TimedOut || res[2].Err == nil {
		t.Fatalf("timeout: %+v", res[2])
	}
	if res[3].Err == nil {
		t.Fatalf("missing binary: %+v", res[3])
	}
	hold, why := Holding(Evaluate(Inputs{Commands: res}))
	if !hold || strings.Count(why, "command: ") != 3 || !strings.Contains(why, "/bin/sleep 30: timed out") {
		t.Fatalf("three of four commands hold: %q", why)
	}
}

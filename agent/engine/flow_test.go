package engine

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/update-agent/update-agent/agent/state"
)

var update = flag.Bool("update", false, "rewrite testdata/trace_*.golden and FLOW.md")

// traceLog keeps the engine's per-decision debug lines as a trace.
type traceLog struct {
	mu    *sync.Mutex
	lines *[]string
}

func newTraceLog() traceLog { return traceLog{mu: &sync.Mutex{}, lines: &[]string{}} }

func (traceLog) Enabled(context.Context, slog.Level) bool { return true }
func (t traceLog) WithAttrs([]slog.Attr) slog.Handler     { return t }
func (t traceLog) WithGroup(string) slog.Handler          { return t }

func (t traceLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "decision" {
		return nil
	}
	a := map[string]string{}
	r.Attrs(func(at slog.Attr) bool { a[at.Key] = at.Value.String(); return true })
	t.mu.Lock()
	defer t.mu.Unlock()
	*t.lines = append(*t.lines, fmt.Sprintf("%-12s %-13s %-12s %-11s %s", a["state"], a["event"], a["next_state"], a["action"], a["reason"]))
	return nil
}

const traceHeader = "phase        event         next phase   action      reason"

// TestGoldenTrace drives a whole cycle through engine.New with the fakes,
// for a follower and for a leader, and compares every decision (phase,
// event, next phase, action, reason) with testdata/trace_*.golden: any
// change to the flow shows here as a diff. Then FLOW.md, rendered from the
// table Decide dispatches through and these traces, is compared the same
// way. -update rewrites all three.
func TestGoldenTrace(t *testing.T) {
	traces := map[string]string{}
	for _, role := range []string{"follower", "leader"} {
		t.Run(role, func(t *testing.T) {
			h := newHarness(t)
			h.w.leader = role == "leader"
			tl := newTraceLog()
			h.log = slog.New(tl)
			h.untilDone()
			h.checkEnd()
			traces[role] = traceHeader + "\n" + strings.Join(*tl.lines, "\n") + "\n"
			golden(t, filepath.Join("testdata", "trace_"+role+".golden"), traces[role])
		})
	}
	t.Run("FLOW.md", func(t *testing.T) {
		if len(traces) != 2 {
			t.Skip("needs both traces")
		}
		golden(t, "FLOW.md", flowDoc(traces))
	})
}

func flowDoc(traces map[string]string) string {
	var b strings.Builder
	b.WriteString(`# The engine's flow

Generated from ` + "`flow.go`" + ` (the table ` + "`Decide`" + ` dispatches through) and from the traces of a
whole cycle through ` + "`engine.New`" + ` (` + "`testdata/trace_*.golden`" + `) by ` + "`go test ./agent/engine -run TestGoldenTrace -update`" + `;
without ` + "`-update`" + ` the test fails on any difference.

## Phase x event

A cell names the step (a method in ` + "`decide.go`" + ` or ` + "`steps.go`" + `) that handles the event when it
arrives in that phase; ` + "`·`" + `: the event is stale there and handled as ` + "`ticked`" + ` (re-evaluated from the
record). ` + "`first:`" + ` runs before any phase's step and may decide instead of it.

`)
	b.WriteString(flowTable())
	for _, role := range []string{"follower", "leader"} {
		fmt.Fprintf(&b, "\n## A whole cycle, %s\n\nOne line per decision; `started` is a new process (the second one after the reboot).\n\n```text\n%s```\n", role, traces[role])
	}
	b.WriteString(`
## What each cell can lead to

Every outcome ` + "`Decide`" + ` gives for a cell over a sweep of event results, records, host states and
policies (` + "`flow_outcomes_test.go`" + `): the next action, and the phase persisted with it.

`)
	b.WriteString(outcomesTable())
	return b.String()
}

// flowTable renders flow as a markdown phase x event table.
func flowTable() string {
	var b strings.Builder
	b.WriteString("| event \\ phase |")
	for _, p := range state.Phases {
		fmt.Fprintf(&b, " %s |", p)
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", len(state.Phases)))
	b.WriteString("\n")
	for _, r := range flow {
		fmt.Fprintf(&b, "| `%s`", r.ev.eventName())
		if r.first != nil {
			fmt.Fprintf(&b, " (first: %s)", funcName(r.first))
		}
		b.WriteString(" |")
		for _, p := range state.Phases {
			if s, ok := r.steps[p]; ok {
				fmt.Fprintf(&b, " %s |", s.name)
			} else {
				b.WriteString(" · |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Every event the engine produces has a row, every row names steps only
// for known phases, and the ticked row covers every phase (stale events
// end there).
func TestFlowTableComplete(t *testing.T) {
	events := []Event{Started{}, Ticked{}, Recovered{}, Checked{}, StageDone{}, CleanedUp{}, OrderQueried{}, SlotHeld{},
		Adopted{}, HooksDone{}, Prechecked{}, NoticeDone{}, FenceDone{}, LeaderMoved{}, FinalizeDone{}, VerifyDone{}, Released{}}
	if len(flow) != len(events) || len(routes) != len(events) {
		t.Errorf("flow has %d rows (%d distinct), want one per event (%d)", len(flow), len(routes), len(events))
	}
	for _, ev := range events {
		if _, ok := routes[ev.eventName()]; !ok {
			t.Errorf("no row for %T", ev)
		}
	}
	for _, r := range flow {
		for p := range r.steps {
			if !slices.Contains(state.Phases, p) {
				t.Errorf("%s: unknown phase %q", r.ev.eventName(), p)
			}
		}
	}
	for _, p := range state.Phases {
		if _, ok := routes[Ticked{}.eventName()].steps[p]; !ok {
			t.Errorf("ticked has no step in %s", p)
		}
	}
}

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (- golden, + now; rewrite with -update if the change is meant):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff is a minimal line diff (longest common subsequence).
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	n, m := len(x), len(y)
	l := make([][]int, n+1)
	for i := range l {
		l[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			fmt.Fprintf(&out, "  %s\n", x[i])
			i, j = i+1, j+1
		case i < n && (j == m || l[i+1][j] >= l[i][j+1]):
			fmt.Fprintf(&out, "- %s\n", x[i])
			i++
		default:
			fmt.Fprintf(&out, "+ %s\n", y[j])
			j++
		}
	}
	return out.String()
}

package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/state"
)

// docs/operations.md's table of update_agent_state's values lists every
// state the metric exports, in flow order, and no other: alerts are
// written from it.
func TestDocsListEveryState(t *testing.T) {
	data, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const header = "| `state` | the node |"
	_, table, ok := strings.Cut(string(data), header+"\n|---|---|\n")
	if !ok {
		t.Fatalf("docs/operations.md has no table headed %q", header)
	}
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| \\S")
	var got []string
	for _, line := range strings.Split(table, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		got = append(got, m[1])
	}
	var want []string
	for _, p := range state.Phases {
		want = append(want, string(p))
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/operations.md lists states %q, the metric exports %q", got, want)
	}
}

package metrics

import (
	"testing"

	"github.com/update-agent/update-agent/agent/graph"
)

func TestGraphChecked(t *testing.T) {
	m := New("test")
	g := NewGraph(m.Registry)
	g.GraphChecked(graph.Report{Reachable: true, InGraph: true, DeadEnd: true, Nodes: 3, Edges: 2, Denied: 1})
	g.GraphChecked(graph.Report{Error: "update graph unreachable: ..."})
	g.GraphChecked(graph.Report{Reachable: true, Why: "not in the graph", Nodes: 5}) // no update, no error
	if v := value(t, m, "update_agent_graph_booted_dead_end", ""); v != 1 {
		t.Errorf("dead end %v, want 1 (kept over checks that could not tell)", v)
	}
	for result, want := range map[string]float64{"ok": 1, "unreachable": 1, "not_in_graph": 1} {
		if v := value(t, m, "update_agent_graph_checks_total", result); v != want {
			t.Errorf("checks{%s} = %v, want %v", result, v, want)
		}
	}
	if value(t, m, "update_agent_graph_nodes", "") != 5 || value(t, m, "update_agent_graph_ignored_targets", "") != 1 {
		t.Error("graph size or ignored targets not recorded")
	}
}

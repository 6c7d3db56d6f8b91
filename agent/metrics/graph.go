package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/update-agent/update-agent/agent/graph"
)

// Graph is the update graph's metrics (updates.source = "graph"), after
// zincati's cincinnati ones.
type Graph struct {
	deadEnd prometheus.Gauge
	nodes   prometheus.Gauge
	edges   prometheus.Gauge
	ignored prometheus.Gauge
	checks  *prometheus.CounterVec
}

// NewGraph registers the graph's metrics in reg (Metrics.Registry).
func NewGraph(reg prometheus.Registerer) *Graph {
	g := &Graph{
		deadEnd: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "graph_booted_dead_end",
			Help: "1 when the update graph marks the booted release a dead end (no update leaves it)."}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "graph_nodes",
			Help: "Releases in the last update graph."}),
		edges: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "graph_edges",
			Help: "Update paths in the last update graph."}),
		ignored: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "graph_ignored_targets",
			Help: "Releases offered from the booted one and left out as deployed here before."}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "graph_checks_total",
			Help: "Update graph checks, by result (ok, unreachable, not_in_graph, error)."}, []string{"result"}),
	}
	reg.MustRegister(g.deadEnd, g.nodes, g.edges, g.ignored, g.checks)
	return g
}

// GraphChecked records a check (graph.Observer).
func (g *Graph) GraphChecked(r graph.Report) {
	result := "ok"
	switch {
	case r.Error != "" && !r.Reachable:
		result = "unreachable"
	case r.Reachable && !r.InGraph:
		result = "not_in_graph" // no update, not an error (graph.Source.Check)
	case r.Error != "":
		result = "error"
	}
	g.checks.WithLabelValues(result).Inc()
	if !r.Reachable {
		return
	}
	g.nodes.Set(float64(r.Nodes))
	g.edges.Set(float64(r.Edges))
	if !r.InGraph {
		return // the booted release's edges are unknown: keep the last answer
	}
	g.ignored.Set(float64(r.Denied))
	if r.DeadEnd {
		g.deadEnd.Set(1)
	} else {
		g.deadEnd.Set(0)
	}
}

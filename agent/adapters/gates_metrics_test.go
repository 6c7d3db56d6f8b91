package adapters

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/metrics"
	"github.com/update-agent/update-agent/agent/oplog"
)

// Each evaluation sets the per-gate gauge in the agent's registry; of two
// commands (one gate, "command"), one failing holds the gate.
func TestGatesHoldingGauge(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.New("test")
	g := Gates{Log: log, Metrics: m, C: &gates.Checker{Runner: oplog.Runner{Log: log}, Commands: []gates.Command{
		{Argv: []string{"false"}, Timeout: time.Minute}, {Argv: []string{"true"}, Timeout: time.Minute},
	}}}
	want := func(v float64) {
		t.Helper()
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "update_agent_gate_holding" {
				continue
			}
			if len(mf.GetMetric()) != 1 {
				t.Fatalf("gate_holding series: %v, want one (gate=command)", mf.GetMetric())
			}
			s := mf.GetMetric()[0]
			if s.GetLabel()[0].GetValue() != gates.GateCommand || s.GetGauge().GetValue() != v {
				t.Errorf("gate_holding = %v, want {gate=%q} %v", s, gates.GateCommand, v)
			}
			return
		}
		t.Fatal("no update_agent_gate_holding in the registry")
	}
	if hold, _ := g.Hold(context.Background()); !hold {
		t.Fatal("a failing command did not hold")
	}
	want(1)
	g.C.Commands = g.C.Commands[1:]
	if hold, why := g.Hold(context.Background()); hold {
		t.Fatalf("held with only a succeeding command: %s", why)
	}
	want(0)
}

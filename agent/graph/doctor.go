package graph

import (
	"context"
	"fmt"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

// Probe is doctor's line for the graph: whether it is reachable, and where
// the booted release stands in it. A dead end fails: the node gets no
// update until someone moves it; so does a booted release the graph lacks,
// which the daemon takes for "no update" (as zincati) and only warns of.
func (s *Source) Probe(ctx context.Context, st *rpmostree.Status) (string, error) {
	t, err := s.Check(ctx, st)
	r := s.Last()
	where := fmt.Sprintf("graph at %s (stream %s, %s)", r.BaseURL, orUnknown(r.Stream), orUnknown(r.Basearch))
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	if !r.InGraph {
		return "", fmt.Errorf("%s: reachable, %d releases; no update: %s", where, r.Nodes, r.Why)
	}
	line := fmt.Sprintf("%s: reachable, %d releases; booted %s (age_index %d)", where, r.Nodes, r.BootedVersion, r.AgeIndex)
	switch {
	case r.DeadEnd:
		return "", fmt.Errorf("%s: a dead end (%s): no update leaves it", line, r.DeadEndReason)
	case t != nil:
		return fmt.Sprintf("%s; update to %s offered", line, r.Target), nil
	}
	return fmt.Sprintf("%s; %s", line, r.Why), nil
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

package graph

import (
	"fmt"
	"slices"
	"strings"
)

// Booted is the release this node runs, as rpm-ostree reports it.
type Booted struct {
	// Checksum is the base commit (ostree payloads).
	Checksum string
	// Image is the booted image pinned by digest ("name@sha256:..."), ""
	// for an ostree origin (OCI payloads).
	Image   string
	Version string
}

// Payload is what a graph node of the booted release carries under scheme.
// A node without a known scheme is no release of anything ("" for it), as
// zincati's is_same_checksum (src/cincinnati/mod.rs) has it.
func (b Booted) Payload(scheme string) string {
	switch {
	case scheme == SchemeOCI:
		return b.Image
	case scheme != SchemeChecksum || b.Image != "":
		return "" // an image-booted host is not the commit of a checksum node
	}
	return b.Checksum
}

// Policy is what the configuration says about choosing.
type Policy struct {
	AllowDowngrade bool
}

// Decision is Choose's answer.
type Decision struct {
	// Booted is the booted release's node, nil when the graph lacks it.
	Booted *Release
	// Target is the release to deploy; nil: none, and Why says why.
	Target *Release
	Why    string
	// Offered counts the releases the graph offers from the booted one;
	// Denied those left out as already deployed here.
	Offered, Denied int
	Downgrade       bool
	// Next are the releases the graph offers from the booted one, denied
	// ones included: a staged release not among them was pulled.
	Next []Release
}

// Choose picks the update for booted, as zincati does: the booted release's
// node, its outgoing edges only (a barrier is then the only way on; a
// release still rolling out is absent for this node), minus the releases in
// deny (payloads deployed here before: the booted and rollback deployments
// and the ones that failed), the highest age_index of the rest, and no
// downgrade unless the policy allows it. The booted release's node, or a
// target of it, that cannot be read fails the choice: the graph is then not
// what the server meant. Other nodes and edges are not looked at.
func Choose(g Graph, booted Booted, deny []string, p Policy) (Decision, error) {
	var d Decision
	cur := -1
	for i, n := range g.Nodes {
		if pl := booted.Payload(n.Metadata[KeyScheme]); pl != "" && n.Payload == pl {
			cur = i
			break
		}
	}
	if cur < 0 {
		id := booted.Checksum
		if booted.Image != "" {
			id = booted.Image
		}
		d.Why = fmt.Sprintf("the booted release %s (%s) is not in the update graph (%d releases): wrong stream or architecture, or a release the server no longer lists", booted.Version, id, len(g.Nodes))
		return d, nil
	}
	b, err := ParseRelease(g.Nodes[cur])
	if err != nil {
		return d, fmt.Errorf("reading the booted release in the update graph: %w", err)
	}
	d.Booted = &b
	var next []Release
	for _, e := range g.Edges {
		if e[0] != uint64(cur) {
			continue
		}
		if e[1] >= uint64(len(g.Nodes)) {
			return d, fmt.Errorf("reading an update target in the update graph: edge %d -> %d names a node beyond the %d nodes", e[0], e[1], len(g.Nodes))
		}
		r, err := ParseRelease(g.Nodes[e[1]])
		if err != nil {
			return d, fmt.Errorf("reading an update target in the update graph: %w", err)
		}
		d.Offered++
		d.Next = append(d.Next, r)
		if slices.Contains(deny, r.Payload) {
			d.Denied++
			continue
		}
		next = append(next, r)
	}
	switch {
	case d.Offered == 0 && b.DeadEnd:
		d.Why = fmt.Sprintf("booted release %s is a dead end (%s): the graph offers no update from it", b.Version, b.DeadEndReason)
		return d, nil
	case d.Offered == 0:
		d.Why = fmt.Sprintf("booted release %s is the newest the update graph offers", b.Version)
		return d, nil
	case len(next) == 0:
		d.Why = fmt.Sprintf("the update graph offers only releases already deployed here and left (%d)", d.Denied)
		return d, nil
	}
	best := slices.MaxFunc(next, func(x, y Release) int {
		switch {
		case x.Less(y):
			return -1
		case y.Less(x):
			return 1
		}
		return 0
	})
	if !b.Less(best) {
		d.Downgrade = true
		if !p.AllowDowngrade {
			d.Why = fmt.Sprintf("the update graph offers %s (age_index %d, not newer than booted %s's %d): a downgrade, refused (updates.allow_downgrade = false)",
				best.Version, best.AgeIndex, b.Version, b.AgeIndex)
			return d, nil
		}
	}
	d.Target = &best
	d.Why = fmt.Sprintf("update graph: %s -> %s", b.Version, best.Version)
	if best.Barrier {
		d.Why += " (an update barrier: every node passes through it)"
	}
	if d.Downgrade {
		d.Why += " (a downgrade, allowed by updates.allow_downgrade)"
	}
	return d, nil
}

// Digest is the "sha256:..." of an OCI pull spec pinned by digest.
func Digest(pullspec string) (string, bool) {
	_, dg, ok := strings.Cut(pullspec, "@")
	if !ok || !strings.HasPrefix(dg, "sha256:") || len(dg) != len("sha256:")+64 {
		return "", false
	}
	return dg, true
}

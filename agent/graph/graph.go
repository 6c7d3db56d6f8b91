// Package graph follows an OS update graph served with the Cincinnati
// protocol, as Fedora CoreOS's zincati does: fetch the graph for this node's
// identity, find the booted release in it, and choose the release to deploy
// along the booted release's outgoing edges (Choose, a pure function). The
// graph server owns barriers and phased rollouts: a barrier is the only edge
// out of the releases before it, and a release still rolling out is offered
// only to nodes whose wariness its rollout has reached.
package graph

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Metadata keys of Fedora CoreOS's graph nodes.
const (
	KeyScheme        = "org.fedoraproject.coreos.scheme"
	KeyAgeIndex      = "org.fedoraproject.coreos.releases.age_index"
	KeyDeadEnd       = "org.fedoraproject.coreos.updates.deadend"
	KeyDeadEndReason = "org.fedoraproject.coreos.updates.deadend_reason"
	KeyBarrier       = "org.fedoraproject.coreos.updates.barrier"
	KeyRollout       = "org.fedoraproject.coreos.updates.rollout"
	KeyStartEpoch    = "org.fedoraproject.coreos.updates.start_epoch"
	KeyStartValue    = "org.fedoraproject.coreos.updates.start_value"
	KeyDuration      = "org.fedoraproject.coreos.updates.duration_minutes"
)

// Payload schemes: an ostree commit checksum, or an OCI pull spec pinned by
// digest ("registry.example/fedora/fedora-coreos@sha256:...").
const (
	SchemeChecksum = "checksum"
	SchemeOCI      = "oci"
)

// Node is one release of the graph, as the server sends it.
type Node struct {
	Version  string            `json:"version"`
	Payload  string            `json:"payload"`
	Metadata map[string]string `json:"metadata"`
}

// Graph is the server's answer: releases, and the allowed transitions as
// pairs of indexes into Nodes.
type Graph struct {
	Nodes []Node      `json:"nodes"`
	Edges [][2]uint64 `json:"edges"`
}

// Release is a node read for a decision.
type Release struct {
	Version string
	// Payload is the checksum or the OCI pull spec, per Scheme.
	Payload  string
	Scheme   string
	AgeIndex uint64
	// DeadEnd: no update leaves this release; DeadEndReason says why.
	DeadEnd       bool
	DeadEndReason string
	Barrier       bool
}

// ParseRelease reads a node as zincati does: version, payload, a known
// scheme and a numeric age_index are required.
func ParseRelease(n Node) (Release, error) {
	r := Release{Version: n.Version, Payload: n.Payload, Scheme: n.Metadata[KeyScheme]}
	switch {
	case n.Version == "":
		return r, errors.New("node without a version")
	case n.Payload == "":
		return r, fmt.Errorf("release %s: empty payload", n.Version)
	case r.Scheme != SchemeChecksum && r.Scheme != SchemeOCI:
		return r, fmt.Errorf("release %s: unknown payload scheme %q (metadata %s)", n.Version, r.Scheme, KeyScheme)
	}
	age, ok := n.Metadata[KeyAgeIndex]
	if !ok {
		return r, fmt.Errorf("release %s: no %s", n.Version, KeyAgeIndex)
	}
	var err error
	if r.AgeIndex, err = strconv.ParseUint(age, 10, 64); err != nil {
		return r, fmt.Errorf("release %s: invalid %s %q", n.Version, KeyAgeIndex, age)
	}
	r.DeadEnd = n.Metadata[KeyDeadEnd] == "true"
	if r.DeadEnd {
		r.DeadEndReason = n.Metadata[KeyDeadEndReason]
		if r.DeadEndReason == "" {
			r.DeadEndReason = "(unknown reason)"
		}
	}
	r.Barrier = n.Metadata[KeyBarrier] == "true"
	return r, nil
}

// Less orders releases as zincati does: by age_index, then version, then
// payload, so that duplicates of an age_index still order the same way.
func (r Release) Less(o Release) bool {
	if r.AgeIndex != o.AgeIndex {
		return r.AgeIndex < o.AgeIndex
	}
	if r.Version != o.Version {
		return r.Version < o.Version
	}
	return r.Payload < o.Payload
}

// Decode reads a graph and checks its shape: every edge is a pair of
// indexes. Whether an index names a node is Choose's to check, and only for
// the booted release's edges: zincati (src/cincinnati/mod.rs, find_update)
// looks up no other, so one bad edge elsewhere does not stop every node.
func Decode(b []byte) (Graph, error) {
	var raw struct {
		Nodes []Node     `json:"nodes"`
		Edges [][]uint64 `json:"edges"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Graph{}, fmt.Errorf("decoding the update graph: %w", err)
	}
	if raw.Nodes == nil || raw.Edges == nil {
		return Graph{}, errors.New("decoding the update graph: no \"nodes\" or no \"edges\"")
	}
	g := Graph{Nodes: raw.Nodes, Edges: make([][2]uint64, len(raw.Edges))}
	for i, e := range raw.Edges {
		if len(e) != 2 {
			return Graph{}, fmt.Errorf("decoding the update graph: edge %d has %d indexes, want 2", i, len(e))
		}
		g.Edges[i] = [2]uint64{e[0], e[1]}
	}
	return g, nil
}

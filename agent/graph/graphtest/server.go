// Package graphtest serves update graphs over HTTP for tests, built the way
// Fedora CoreOS's graph server (fedora-coreos-cincinnati) builds them from
// its release metadata: edges lead only to releases that are rolling out
// (from every release since the previous barrier) and to barriers (from
// every release since the barrier before); a dead end loses its outgoing
// edges; a release still rolling out is hidden from a client whose
// wariness is above the rollout's progress at the server's clock.
package graphtest

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/update-agent/update-agent/agent/graph"
)

// Release is one entry of the server's release metadata; its age_index is
// its position in Server.Releases.
type Release struct {
	Version string
	// Checksum is the payload (scheme "checksum"); Image, when set, makes
	// it an OCI payload instead.
	Checksum string
	Image    string
	Barrier  bool
	// DeadEnd, when set, is the dead-end reason.
	DeadEnd string
	// Rollout, when set, makes the release a rollout target (every
	// release of Fedora CoreOS has one; finished rollouts stay).
	Rollout *Rollout
}

// Rollout is a phased rollout: its progress grows from StartValue at
// StartEpoch to 1 after Minutes (no progress past StartValue when 0).
type Rollout struct {
	StartEpoch int64
	StartValue float64
	Minutes    uint64
}

// Done is a finished rollout (at 100% from the epoch on).
var Done = &Rollout{StartValue: 1}

// Server is a graph server. Set its fields before requests come in; Set
// replaces the releases while serving.
type Server struct {
	*httptest.Server
	// Now is the server's clock for rollouts (default time.Now).
	Now func() time.Time
	// Raw, when set, is served as the answer instead of a graph.
	Raw []byte

	mu       sync.Mutex
	releases []Release
	queries  []url.Values
}

// New starts a server with releases.
func New(releases ...Release) *Server {
	s := &Server{releases: releases}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Set replaces the releases.
func (s *Server) Set(releases ...Release) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = releases
}

// Queries returns the query parameters of every request so far.
func (s *Server) Queries() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.queries...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	q := r.URL.Query()
	s.queries = append(s.queries, q)
	rels, raw := s.releases, s.Raw
	s.mu.Unlock()
	if r.URL.Path != "/v1/graph" {
		fail(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
		return
	}
	if q.Get("basearch") == "" || q.Get("stream") == "" {
		fail(w, http.StatusBadRequest, "invalid_params", "missing basearch or stream")
		return
	}
	if raw != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Write(raw)
		return
	}
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	g := Throttle(Build(rels), rels, wariness(q), now)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(g)
}

func fail(w http.ResponseWriter, code int, kind, value string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"kind": kind, "value": value})
}

// wariness is the client's rollout_wariness, else one derived from its
// node_uuid (stable per node), else the middle.
func wariness(q url.Values) float64 {
	if v, err := strconv.ParseFloat(q.Get("rollout_wariness"), 64); err == nil {
		return min(max(v, 0), 1)
	}
	if id := q.Get("node_uuid"); id != "" {
		h := fnv.New64a()
		h.Write([]byte(id))
		return float64(h.Sum64()%1000) / 1000
	}
	return 0.5
}

// Build makes the full graph of rels: nodes with their metadata, edges to
// rollouts and barriers, none out of dead ends.
func Build(rels []Release) graph.Graph {
	g := graph.Graph{Nodes: []graph.Node{}, Edges: [][2]uint64{}}
	var barriers []int
	for i, r := range rels {
		md := map[string]string{graph.KeyAgeIndex: strconv.Itoa(i), graph.KeyScheme: graph.SchemeChecksum}
		payload := r.Checksum
		if r.Image != "" {
			md[graph.KeyScheme], payload = graph.SchemeOCI, r.Image
		}
		if r.DeadEnd != "" {
			md[graph.KeyDeadEnd], md[graph.KeyDeadEndReason] = "true", r.DeadEnd
		}
		if r.Barrier {
			md[graph.KeyBarrier] = "true"
			barriers = append(barriers, i)
		}
		if ro := r.Rollout; ro != nil {
			md[graph.KeyRollout] = "true"
			md[graph.KeyStartEpoch] = strconv.FormatInt(ro.StartEpoch, 10)
			md[graph.KeyStartValue] = strconv.FormatFloat(ro.StartValue, 'f', -1, 64)
			if ro.Minutes > 0 {
				md[graph.KeyDuration] = strconv.FormatUint(ro.Minutes, 10)
			}
		}
		g.Nodes = append(g.Nodes, graph.Node{Version: r.Version, Payload: payload, Metadata: md})
	}
	prevBarrier := func(i int) int {
		p := 0
		for _, b := range barriers {
			if b < i {
				p = b
			}
		}
		return p
	}
	for i := len(rels) - 1; i >= 0; i-- {
		if rels[i].Rollout == nil {
			continue
		}
		for from := prevBarrier(i); from < i; from++ {
			g.Edges = append(g.Edges, [2]uint64{uint64(from), uint64(i)})
		}
	}
	start := 0
	for _, b := range barriers {
		if rels[b].Rollout == nil {
			for from := start; from < b; from++ {
				g.Edges = append(g.Edges, [2]uint64{uint64(from), uint64(b)})
			}
		}
		start = b
	}
	kept := g.Edges[:0]
	for _, e := range g.Edges {
		if rels[e[0]].DeadEnd == "" {
			kept = append(kept, e)
		}
	}
	g.Edges = kept
	return g
}

// Throttle removes the edges into releases whose rollout has not reached
// wariness at now.
func Throttle(g graph.Graph, rels []Release, wariness float64, now time.Time) graph.Graph {
	hidden := map[uint64]bool{}
	t := now.Unix()
	for i, r := range rels {
		ro := r.Rollout
		if ro == nil {
			continue
		}
		progress := ro.StartValue
		switch {
		case t < ro.StartEpoch:
			progress = 0
		case ro.Minutes > 0:
			end := ro.StartEpoch + int64(ro.Minutes)*60
			if t > end {
				progress = 1
			} else {
				progress += (1 - ro.StartValue) / float64(end-ro.StartEpoch) * float64(t-ro.StartEpoch)
			}
		}
		if wariness > progress {
			hidden[uint64(i)] = true
		}
	}
	kept := [][2]uint64{}
	for _, e := range g.Edges {
		if !hidden[e[1]] {
			kept = append(kept, e)
		}
	}
	g.Edges = kept
	return g
}

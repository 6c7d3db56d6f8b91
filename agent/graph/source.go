package graph

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// Identity is the node's identity as configured ([identity]); empty
// Basearch, Stream and Platform are read from the host.
type Identity struct {
	Basearch, Stream, Platform, Group, NodeUUID string
	// Wariness < 0: not sent (the server decides).
	Wariness float64
}

// Observer is told the outcome of each check (metrics).
type Observer interface {
	GraphChecked(r Report)
}

// DeadEndNotice shows the people on the host that the booted release is a
// dead end (a motd line); Clear takes it back.
type DeadEndNotice interface {
	Set(version, reason string) error
	Clear() error
}

// Source chooses the update from the update graph (updates.source =
// "graph"). Its Check is the OS adapter's check for that source.
type Source struct {
	Client   *Client
	Identity Identity
	Policy   Policy
	// Now stamps reports (default time.Now).
	Now      func() time.Time
	Observer Observer
	Notice   DeadEndNotice
	Log      *slog.Logger
	// Override is the booted status override file of Fedora CoreOS's
	// ostree->OCI migration (rpmostree.BootedOverrideFile under the root;
	// "" for none): while it exists, its deployment is taken for the
	// booted one, so the OCI graph is asked and its release rebased to.
	Override string

	mu       sync.Mutex
	last     *Report
	deadEnd  *bool // the notice's state, nil before the first answer
	lastWhy  string
	lastFail string
}

// Report is the outcome of the last check, for status, doctor and metrics.
type Report struct {
	At       time.Time `json:"at"`
	BaseURL  string    `json:"base_url"`
	Stream   string    `json:"stream,omitempty"`
	Basearch string    `json:"basearch,omitempty"`
	// Reachable: the server answered with a graph.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	Nodes     int    `json:"nodes"`
	Edges     int    `json:"edges"`
	// InGraph: the booted release was found; BootedVersion and AgeIndex
	// say where it stands.
	InGraph       bool   `json:"in_graph"`
	BootedVersion string `json:"booted_version,omitempty"`
	AgeIndex      uint64 `json:"age_index,omitempty"`
	DeadEnd       bool   `json:"dead_end,omitempty"`
	DeadEndReason string `json:"dead_end_reason,omitempty"`
	Offered       int    `json:"offered"`
	Denied        int    `json:"denied"`
	Target        string `json:"target,omitempty"`
	Why           string `json:"why"`
}

// Last is the report of the last check, nil before the first.
func (s *Source) Last() *Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return nil
	}
	r := *s.last
	return &r
}

// Check fetches the graph for the node that st describes and chooses its
// update; nil when the graph offers none. An unreachable or unreadable graph
// is an error, never "no update". A booted release the graph lacks is no
// update, with a warning (Report.InGraph false), as zincati's find_update
// (src/cincinnati/mod.rs) has it: the server's answer for a stream or
// architecture it does not serve, or during a migration (the override).
func (s *Source) Check(ctx context.Context, st *rpmostree.Status) (*state.Target, error) {
	r, t, err := s.check(ctx, st)
	r.At = s.now()
	if err != nil {
		r.Error = err.Error()
	}
	s.record(r, err)
	if s.Observer != nil {
		s.Observer.GraphChecked(r)
	}
	return t, err
}

func (s *Source) check(ctx context.Context, st *rpmostree.Status) (Report, *state.Target, error) {
	r := Report{BaseURL: s.Client.BaseURL}
	st, err := rpmostree.WithBootedOverride(st, s.Override)
	if err != nil {
		return r, nil, fmt.Errorf("checking the update graph: %w", err)
	}
	bd, ok := st.Booted()
	if !ok {
		return r, nil, errors.New("checking the update graph: rpm-ostree status shows no booted deployment")
	}
	p, booted, err := s.params(bd)
	r.Stream, r.Basearch = p.Stream, p.Basearch
	if err != nil {
		return r, nil, fmt.Errorf("checking the update graph: %w", err)
	}
	g, err := s.Client.Fetch(ctx, p)
	if err != nil {
		return r, nil, fmt.Errorf("checking the update graph: %w", err)
	}
	r.Reachable, r.Nodes, r.Edges = true, len(g.Nodes), len(g.Edges)
	d, err := Choose(g, booted, Denylist(st), s.Policy)
	r.Why, r.Offered, r.Denied = d.Why, d.Offered, d.Denied
	if d.Booted != nil {
		r.InGraph, r.BootedVersion, r.AgeIndex = true, d.Booted.Version, d.Booted.AgeIndex
		r.DeadEnd, r.DeadEndReason = d.Booted.DeadEnd, d.Booted.DeadEndReason
	}
	if err != nil {
		return r, nil, fmt.Errorf("checking the update graph: %w", err)
	}
	if d.Booted == nil {
		r.Why = fmt.Sprintf("stream %s, %s: %s", p.Stream, p.Basearch, d.Why)
		return r, nil, nil
	}
	if d.Target == nil {
		if p := pulled(st, d); p != nil {
			r.Why = p.Error()
			return r, nil, p
		}
		return r, nil, nil
	}
	r.Target = d.Target.Version
	t := &state.Target{Checksum: d.Target.Payload, Version: d.Target.Version, Stream: p.Stream}
	if d.Target.Scheme == SchemeOCI {
		t.Image = d.Target.Payload
		dg, ok := Digest(d.Target.Payload)
		if !ok {
			return r, nil, fmt.Errorf("checking the update graph: release %s's payload %q is not pinned by a sha256 digest", d.Target.Version, d.Target.Payload)
		}
		t.Checksum = dg
	}
	return r, t, nil
}

// ErrPulled: the update graph no longer offers the staged release.
var ErrPulled = errors.New("the staged release was pulled from the update graph")

// PulledError is Check's answer when the graph no longer offers the staged
// release from the booted one: the engine's PulledRelease, which discards
// and sets it aside; not a failure to check.
type PulledError struct {
	// Checksum is the staged deployment's (the base commit, or the image
	// digest), as the engine names it.
	Checksum, Version string
	Why               string
}

func (e *PulledError) Error() string {
	return fmt.Sprintf("release %s (%s) was pulled: %s", e.Version, e.Checksum, e.Why)
}

func (e *PulledError) Is(target error) bool { return target == ErrPulled }

// PulledChecksum is engine.PulledRelease's.
func (e *PulledError) PulledChecksum() string { return e.Checksum }

// pulled is the staged release of st when the graph no longer offers it
// from the booted release (Fedora pulls a broken release by taking it, or
// the edges to it, out of the graph); nil while it is offered, or when
// nothing is staged. Only the graph can tell: an empty `upgrade --check`
// says nothing of what is staged.
func pulled(st *rpmostree.Status, d Decision) *PulledError {
	s, ok := st.Staged()
	if !ok || d.Booted == nil {
		return nil
	}
	payload := s.Target()
	if s.IsContainer() {
		if payload, ok = pinned(s); !ok {
			return nil // cannot name it as the graph does: cannot tell
		}
	}
	for _, r := range d.Next {
		if r.Payload == payload {
			return nil
		}
	}
	return &PulledError{Checksum: s.Target(), Version: s.Version,
		Why: fmt.Sprintf("the update graph no longer offers it from booted %s (%s)", d.Booted.Version, d.Why)}
}

// params is the query for the booted deployment bd.
func (s *Source) params(bd rpmostree.Deployment) (Params, Booted, error) {
	id := s.Identity
	p := Params{Basearch: id.Basearch, Stream: id.Stream, Platform: id.Platform, Group: id.Group,
		NodeUUID: id.NodeUUID, Wariness: id.Wariness, OSVersion: bd.Version}
	if p.Basearch == "" {
		p.Basearch = HostBasearch()
	}
	b := Booted{Version: bd.Version}
	if bd.IsContainer() {
		img, ok := pinned(bd)
		if !ok {
			return p, b, fmt.Errorf("the booted image %q has no digest in rpm-ostree status", bd.ContainerImageReference)
		}
		b.Image, p.OSChecksum, p.OCI = img, img, true
	} else {
		b.Checksum = bd.Target()
		p.OSChecksum = b.Checksum
	}
	if p.Stream == "" {
		st, ok := Stream(bd.BaseCommitMeta)
		if !ok {
			return p, b, errors.New("the booted commit names no update stream (no fedora-coreos.stream or com.coreos.stream in its metadata): set [identity] stream")
		}
		p.Stream = st
	}
	return p, b, nil
}

// pinned is the booted image as graph payloads name it: the image's name
// (without transport or tag) at its digest.
func pinned(d rpmostree.Deployment) (string, bool) {
	if d.ContainerImageReferenceDigest == "" {
		return "", false
	}
	return ImageName(d.ContainerImageReference) + "@" + d.ContainerImageReferenceDigest, true
}

// ImageName strips an ostree image reference, or a pull spec, down to the
// image's name:
// "ostree-remote-image:fedora:docker://registry.example/fedora/fedora-coreos:stable"
// and "ostree-remote-registry:fedora:registry.example/fedora/fedora-coreos:stable"
// (what Fedora CoreOS's OCI migration rebases to) are
// "registry.example/fedora/fedora-coreos".
func ImageName(ref string) string {
	if _, name, ok := splitImageRef(ref); ok {
		ref = name
	}
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// Denylist is the payloads of the deployments on the host other than the
// staged one (booted, rollback): zincati never updates to a release it
// deployed before, which is how a node that rolled back stays off it.
func Denylist(st *rpmostree.Status) []string {
	var out []string
	for _, d := range st.Deployments {
		if d.Staged {
			continue
		}
		if d.IsContainer() {
			if img, ok := pinned(d); ok {
				out = append(out, img)
			}
			continue
		}
		out = append(out, d.Target())
	}
	return out
}

func (s *Source) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// record keeps r, logs what changed and keeps the dead-end notice in step.
func (s *Source) record(r Report, err error) {
	s.mu.Lock()
	s.last = &r
	changed := s.lastWhy != r.Why || s.lastFail != r.Error
	s.lastWhy, s.lastFail = r.Why, r.Error
	var flip *bool
	if r.InGraph && (s.deadEnd == nil || *s.deadEnd != r.DeadEnd) {
		v := r.DeadEnd
		s.deadEnd, flip = &v, &v
	}
	s.mu.Unlock()
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	if changed {
		switch {
		case err != nil:
			log.Warn("update graph", "err", err)
		case r.Reachable && !r.InGraph:
			log.Warn("update graph: no update", "decision", r.Why)
		default:
			log.Info("update graph", "decision", r.Why, "booted", r.BootedVersion, "target", r.Target)
		}
	}
	if flip == nil || s.Notice == nil {
		return
	}
	var nerr error
	if *flip {
		log.Warn("the booted release is a dead end: no update leaves it", "version", r.BootedVersion, "reason", r.DeadEndReason)
		nerr = s.Notice.Set(r.BootedVersion, r.DeadEndReason)
	} else {
		nerr = s.Notice.Clear()
	}
	if nerr != nil {
		log.Warn("updating the dead-end notice", "err", nerr)
		s.mu.Lock()
		s.deadEnd = nil // try again next check
		s.mu.Unlock()
	}
}

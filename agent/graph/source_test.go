package graph_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/graph"
	gt "github.com/update-agent/update-agent/agent/graph/graphtest"
	"github.com/update-agent/update-agent/agent/rpmostree"
)

type notice struct{ set, cleared int }

func (n *notice) Set(string, string) error { n.set++; return nil }
func (n *notice) Clear() error             { n.cleared++; return nil }

type observer struct{ last graph.Report }

func (o *observer) GraphChecked(r graph.Report) { o.last = r }

func status(deps ...rpmostree.Deployment) *rpmostree.Status {
	return &rpmostree.Status{Deployments: deps}
}

func booted(c byte, v string) rpmostree.Deployment {
	return rpmostree.Deployment{ID: "d" + v, Checksum: sum(c), Version: v, Booted: true,
		BaseCommitMeta: map[string]any{"fedora-coreos.stream": "stable"}}
}

func TestSource(t *testing.T) {
	s := gt.New(rel("40.1", 'a'), gt.Release{Version: "40.2", Checksum: sum('b'), DeadEnd: "etcd breaks", Rollout: gt.Done})
	defer s.Close()
	n, o := &notice{}, &observer{}
	src := &graph.Source{Client: &graph.Client{BaseURL: s.URL}, Identity: graph.Identity{Wariness: -1}, Notice: n, Observer: o}
	ctx := context.Background()

	tg, err := src.Check(ctx, status(booted('a', "40.1")))
	if err != nil || tg == nil || tg.Checksum != sum('b') || tg.Version != "40.2" {
		t.Fatalf("check = %+v, %v", tg, err)
	}
	if q := s.Queries()[0]; q.Get("stream") != "stable" || q.Get("os_checksum") != sum('a') || q.Get("basearch") == "" {
		t.Errorf("query %v", q)
	}
	if n.set != 0 || n.cleared != 1 {
		t.Errorf("notice set %d cleared %d, want cleared once (not a dead end)", n.set, n.cleared)
	}

	// Booted on the dead end: no target, the notice, the report says so.
	for range 2 {
		tg, err = src.Check(ctx, status(booted('b', "40.2")))
		if err != nil || tg != nil {
			t.Fatalf("check on a dead end = %+v, %v", tg, err)
		}
	}
	if n.set != 1 {
		t.Errorf("notice set %d times, want once", n.set)
	}
	if r := src.Last(); !r.DeadEnd || r.DeadEndReason != "etcd breaks" || !strings.Contains(r.Why, "dead end") || o.last.BootedVersion != "40.2" {
		t.Errorf("report %+v", r)
	}

	// A rollback deployment is not updated to again.
	rb := rpmostree.Deployment{ID: "rb", Checksum: sum('b'), Version: "40.2"}
	if tg, err = src.Check(ctx, status(booted('a', "40.1"), rb)); err != nil || tg != nil {
		t.Fatalf("check with 40.2 rolled back from = %+v, %v", tg, err)
	}
	// A staged one is not denied: it is what the graph still offers.
	stg := rb
	stg.Staged = true
	if tg, err = src.Check(ctx, status(stg, booted('a', "40.1"))); err != nil || tg == nil {
		t.Fatalf("check with 40.2 staged = %+v, %v", tg, err)
	}

	// Not in the graph: no update, said in the report (zincati warns and
	// offers nothing; the check did not fail).
	tg, err = src.Check(ctx, status(booted('z', "39.9")))
	if r := src.Last(); err != nil || tg != nil || r.InGraph || !r.Reachable || !strings.Contains(r.Why, "39.9") {
		t.Errorf("not in graph: %+v, %v, report %+v", tg, err, r)
	}

	// No stream: said what to set.
	nb := booted('a', "40.1")
	nb.BaseCommitMeta = nil
	if _, err = src.Check(ctx, status(nb)); err == nil || !strings.Contains(err.Error(), "[identity] stream") {
		t.Errorf("no stream: %v", err)
	}

	// Unreachable: an error that says so, and the report.
	s.Close()
	_, err = src.Check(ctx, status(booted('a', "40.1")))
	if !errors.Is(err, graph.ErrUnreachable) {
		t.Errorf("unreachable: %v", err)
	}
	if r := src.Last(); r.Reachable || r.Error == "" {
		t.Errorf("report %+v", r)
	}
}

func TestSourceOCI(t *testing.T) {
	img := "quay.example/fedora/coreos"
	s := gt.New(gt.Release{Version: "41.1", Image: img + "@sha256:" + sum('1'), Rollout: gt.Done},
		gt.Release{Version: "41.2", Image: img + "@sha256:" + sum('2'), Rollout: gt.Done})
	defer s.Close()
	src := &graph.Source{Client: &graph.Client{BaseURL: s.URL}, Identity: graph.Identity{Stream: "stable", Wariness: -1}}
	b := rpmostree.Deployment{ID: "x", Booted: true, Version: "41.1", Checksum: sum('f'),
		ContainerImageReference:       "ostree-remote-image:fedora:docker://" + img + ":stable",
		ContainerImageReferenceDigest: "sha256:" + sum('1')}
	tg, err := src.Check(context.Background(), status(b))
	if err != nil || tg == nil || tg.Checksum != "sha256:"+sum('2') {
		t.Fatalf("check = %+v, %v", tg, err)
	}
	if q := s.Queries()[0]; q.Get("oci") != "true" || q.Get("os_checksum") != img+"@sha256:"+sum('1') {
		t.Errorf("query %v", q)
	}
}

// TestSourceMigrationOverride: with Fedora CoreOS's booted status override
// in place, an ostree-booted node asks the OCI graph as the image the file
// names, and its target carries the image and stream to rebase to
// (zincati's src/rpm_ostree/cli_status.rs).
func TestSourceMigrationOverride(t *testing.T) {
	img := "quay.example/fedora/coreos"
	s := gt.New(gt.Release{Version: "41.1", Image: img + "@sha256:" + sum('1'), Rollout: gt.Done},
		gt.Release{Version: "41.2", Image: img + "@sha256:" + sum('2'), Rollout: gt.Done})
	defer s.Close()
	override := filepath.Join(t.TempDir(), "booted-status-override.json")
	src := &graph.Source{Client: &graph.Client{BaseURL: s.URL}, Identity: graph.Identity{Wariness: -1}, Override: override}
	ctx := context.Background()
	// Without the file: the checksum graph, where this image graph lacks it.
	if tg, err := src.Check(ctx, status(booted('a', "41.1"))); err != nil || tg != nil || src.Last().InGraph {
		t.Fatalf("without the override: %+v, %v", tg, err)
	}
	// As coreos-oci-rebase writes it (fedora-coreos-config,
	// overlay.d/35oci-migration): the OCI graph's payload for the booted
	// version, under ostree-remote-registry.
	file := `{"booted": true, "checksum": "` + sum('a') + `", "version": "41.1",
		"container-image-reference": "ostree-remote-registry:fedora:` + img + `@sha256:` + sum('1') + `",
		"container-image-reference-digest": "sha256:` + sum('1') + `",
		"base-commit-meta": {"fedora-coreos.stream": "stable"}}`
	if err := os.WriteFile(override, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	tg, err := src.Check(ctx, status(booted('a', "41.1")))
	if err != nil || tg == nil || tg.Image != img+"@sha256:"+sum('2') || tg.Checksum != "sha256:"+sum('2') || tg.Stream != "stable" {
		t.Fatalf("with the override: %+v, %v", tg, err)
	}
	if q := s.Queries()[1]; q.Get("oci") != "true" || q.Get("os_checksum") != img+"@sha256:"+sum('1') {
		t.Errorf("query %v", q)
	}
}

// A staged release the graph no longer offers from the booted one is
// reported pulled (engine.PulledError), however it went: taken out of the
// graph, or its edges gone. While it is offered, or nothing is staged, an
// empty answer is "no update".
func TestSourcePulled(t *testing.T) {
	s := gt.New(rel("40.1", 'a'), rel("40.2", 'b'))
	defer s.Close()
	src := &graph.Source{Client: &graph.Client{BaseURL: s.URL}, Identity: graph.Identity{Wariness: -1}}
	ctx := context.Background()
	stg := rpmostree.Deployment{ID: "s", Checksum: sum('b'), Version: "40.2", Staged: true}
	if tg, err := src.Check(ctx, status(stg, booted('a', "40.1"))); err != nil || tg == nil || tg.Checksum != sum('b') {
		t.Fatalf("check with 40.2 staged and offered = %+v, %v", tg, err)
	}
	for _, tc := range []struct {
		name string
		rels []gt.Release
	}{
		{"taken out of the graph", []gt.Release{rel("40.1", 'a')}},
		{"its edges gone (a dead end before it)", []gt.Release{{Version: "40.1", Checksum: sum('a'), DeadEnd: "pulled", Rollout: gt.Done}, rel("40.2", 'b')}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.Set(tc.rels...)
			tg, err := src.Check(ctx, status(stg, booted('a', "40.1")))
			var p *graph.PulledError
			if tg != nil || !errors.As(err, &p) || p.Checksum != sum('b') || p.Version != "40.2" || !errors.Is(err, graph.ErrPulled) {
				t.Fatalf("check = %+v, %v; want 40.2 pulled", tg, err)
			}
			if r := src.Last(); !strings.Contains(r.Why, "pulled") {
				t.Errorf("report %+v", r)
			}
			// Nothing staged: no update, not an error.
			if tg, err := src.Check(ctx, status(booted('a', "40.1"))); tg != nil || err != nil {
				t.Errorf("check with nothing staged = %+v, %v", tg, err)
			}
		})
	}
}

// TestProbe: doctor fails a booted release the graph lacks, which the
// daemon only warns of (no update).
func TestProbe(t *testing.T) {
	s := gt.New(rel("40.1", 'a'), rel("40.2", 'b'))
	defer s.Close()
	src := &graph.Source{Client: &graph.Client{BaseURL: s.URL}, Identity: graph.Identity{Wariness: -1}}
	ctx := context.Background()
	if line, err := src.Probe(ctx, status(booted('a', "40.1"))); err != nil || !strings.Contains(line, "update to 40.2 offered") {
		t.Errorf("probe = %q, %v", line, err)
	}
	if _, err := src.Probe(ctx, status(booted('z', "39.9"))); err == nil || !strings.Contains(err.Error(), "not in the update graph") {
		t.Errorf("probe of a release the graph lacks: %v, want a failure", err)
	}
}

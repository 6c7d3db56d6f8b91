package adapters

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// An exact staging (updates.source = "graph") that leaves another release
// staged than the one chosen discards it and says so: it is never adopted.
func TestExactStagingDiscardsAnotherRelease(t *testing.T) {
	ctx := context.Background()
	env, o, stager := host(t)
	chosen := env.Publish(env.Ref, 1)
	other := env.Publish(env.Ref, 2)
	// rpm-ostree answering the deploy of chosen with other (a repository
	// that serves another commit under the name, a concurrent deploy).
	wrapper := filepath.Join(t.TempDir(), "rpm-ostree")
	script := "#!/bin/sh\nfor a; do shift; [ \"$a\" = revision=" + chosen + " ] && a=revision=" + other +
		"; set -- \"$@\" \"$a\"; done\nexec " + stager.Client.Path + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := *stager.Client
	c.Path = wrapper
	stager.Client, stager.Exact = &c, true
	err := stager.Stage(ctx, state.Target{Checksum: chosen})
	if !errors.Is(err, errStagedNotChosen) || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), "discarded it") {
		t.Fatalf("err = %v, want the other release named and discarded", err)
	}
	st, err := o.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Staged != nil {
		t.Fatalf("staged after the refusal: %+v", st.Staged)
	}
	// Without the rewrite, the chosen release stages.
	stager.Client = o.Client
	if err := stager.Stage(ctx, state.Target{Checksum: chosen}); err != nil {
		t.Fatal(err)
	}
}

// TestExactRequestOCI: an update graph's OCI release is staged as zincati
// stages it (src/rpm_ostree/actor.rs): deploy the digest when the local
// deployment (the staged one, else the booted) follows the image at the
// stream's tag, else rebase to that tag at the digest; with the migration's
// booted status override, over the image it names.
func TestExactRequestOCI(t *testing.T) {
	const img, dg = "quay.example/fedora/coreos", "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	target := state.Target{Checksum: dg, Version: "41.2", Image: img + "@" + dg, Stream: "stable"}
	on := func(ref string, staged bool) rpmostree.Deployment {
		return rpmostree.Deployment{ContainerImageReference: ref, ContainerImageReferenceDigest: "sha256:1", Booted: !staged, Staged: staged}
	}
	tagged := "ostree-remote-image:fedora:docker://" + img + ":stable"
	renamed := "ostree-remote-image:fedora:docker://old.example/coreos:stable"
	deploy := rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: dg, SkipBranchCheck: true}
	rebase := rpmostree.StageRequest{Kind: rpmostree.StageRebase, Ref: tagged, Revision: dg}
	ostree := rpmostree.Deployment{Checksum: strings.Repeat("a", 64), Booted: true}
	for _, tc := range []struct {
		name     string
		deps     []rpmostree.Deployment
		override string
		t        state.Target
		want     rpmostree.StageRequest
		err      string
	}{
		{name: "on the stream's tag", deps: []rpmostree.Deployment{on(tagged, false)}, t: target, want: deploy},
		{name: "renamed image", deps: []rpmostree.Deployment{on(renamed, false)}, t: target, want: rebase},
		{name: "a version tag", deps: []rpmostree.Deployment{on("ostree-remote-image:fedora:docker://"+img+":41.1", false)}, t: target, want: rebase},
		{name: "already rebased, staged", deps: []rpmostree.Deployment{on(tagged, true), on(renamed, false)}, t: target, want: deploy},
		{name: "a commit", deps: []rpmostree.Deployment{ostree}, t: state.Target{Checksum: strings.Repeat("b", 64)},
			want: rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: strings.Repeat("b", 64), SkipBranchCheck: true}},
		{name: "an ostree origin", deps: []rpmostree.Deployment{ostree}, t: target, err: "not an image from a registry"},
		{name: "the migration's override", deps: []rpmostree.Deployment{ostree}, t: target, want: rebase,
			override: `{"booted":true,"checksum":"x","version":"41.1","container-image-reference":"` + renamed + `","container-image-reference-digest":"sha256:1"}`},
		{name: "a malformed override", deps: []rpmostree.Deployment{ostree}, t: target, override: "{", err: "booted status override"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.override != "" {
				path = filepath.Join(t.TempDir(), "booted-status-override.json")
				if err := os.WriteFile(path, []byte(tc.override), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := exactRequest(&rpmostree.Status{Deployments: tc.deps}, path, tc.t)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("request %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// onStreamNext makes stager exact, its rpm-ostree's status naming stream
// "next" on every deployment: the stand-in's commits name no stream, and a
// Fedora CoreOS commit carries it.
func onStreamNext(t *testing.T, stager *PlainStager) {
	t.Helper()
	c := *stager.Client
	c.Path = standintest.OnStream(t, stager.Client.Path, "next")
	stager.Client, stager.Exact = &c, true
}

// An exact staging whose staged release names another stream than the one
// the graph was asked for returns graph.WrongStreamError, which the engine
// sets aside and discards (engine.PulledRelease); zincati's
// confirm_valid_stream. The stand-in's commits name no stream: a wrapper
// adds one to status, as a Fedora CoreOS commit carries it.
func TestExactStagingChecksStream(t *testing.T) {
	ctx := context.Background()
	env, _, stager := host(t)
	chosen := env.Publish(env.Ref, 1)
	onStreamNext(t, &stager)
	err := stager.Stage(ctx, state.Target{Checksum: chosen, Version: "41.2", Stream: "stable"})
	var p engine.PulledRelease
	if !errors.Is(err, graph.ErrWrongStream) || !errors.As(err, &p) || p.PulledChecksum() != chosen {
		t.Fatalf("err = %v, want the release on stream next set aside", err)
	}
	// On the stream followed, it stages.
	c2 := *stager.Client
	stager.Client = &c2
	if err := c2.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stager.Stage(ctx, state.Target{Checksum: chosen, Version: "41.2", Stream: "next"}); err != nil {
		t.Fatal(err)
	}
}

// StageOnce (stage-once) discards what the daemon's engine would after the
// same staging: a release on another stream is not left staged.
func TestStageOnceDiscardsAnotherStream(t *testing.T) {
	ctx := context.Background()
	env, o, stager := host(t)
	chosen := env.Publish(env.Ref, 1)
	onStreamNext(t, &stager)
	_, err := stager.StageOnce(ctx, state.Target{Checksum: chosen, Version: "41.2", Stream: "stable"})
	if !errors.Is(err, graph.ErrWrongStream) || !strings.Contains(err.Error(), "discarded its staged deployment") {
		t.Fatalf("err = %v, want the release on stream next discarded", err)
	}
	if st, err := o.Status(ctx); err != nil || st.Staged != nil {
		t.Fatalf("staged after the refusal: %+v, %v", st, err)
	}
	if _, err := stager.StageOnce(ctx, state.Target{Checksum: chosen, Version: "41.2", Stream: "next"}); err != nil {
		t.Fatal(err)
	}
	if st, err := o.Status(ctx); err != nil || st.Staged == nil || st.Staged.Checksum != chosen {
		t.Fatalf("not staged on the stream followed: %+v, %v", st, err)
	}
}

package adapters

import (
	"context"
	gofs "os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// checkTarget over what `upgrade --check` prints for each kind of origin
// (agent/rpmostree's ParseCheck fixtures, from upstream).
func TestCheckTarget(t *testing.T) {
	const img = "ostree-image-signed:docker://registry.example/example/os:stable"
	ostree := rpmostree.Deployment{Checksum: "c0", Origin: "fedora:os/stable", Booted: true}
	layered := rpmostree.Deployment{Checksum: "m0", BaseChecksum: "c0", Origin: "fedora:os/stable", Booted: true}
	image := rpmostree.Deployment{Checksum: "c0", ContainerImageReference: img, ContainerImageReferenceDigest: "sha256:b", Booted: true}
	cached := &rpmostree.CachedUpdate{Origin: img, Checksum: "c0", Version: "41.2"}
	commit := rpmostree.CheckResult{Available: true, Version: "41.2", Commit: "c1"}
	layers := rpmostree.CheckResult{Available: true, Layers: true}
	pkgs := rpmostree.CheckResult{Available: true, Diff: "1 upgraded"}
	for _, c := range []struct {
		name    string
		booted  rpmostree.Deployment
		cached  *rpmostree.CachedUpdate
		r       rpmostree.CheckResult
		want    *state.Target
		wantErr bool
	}{
		{"nothing new", ostree, nil, rpmostree.CheckResult{}, nil, false},
		{"ostree: the new commit", ostree, nil, commit, &state.Target{Checksum: "c1", Version: "41.2"}, false},
		{"layered, new base: the new base commit", layered, nil, rpmostree.CheckResult{Available: true, Commit: "c1", Diff: "2 upgraded"},
			&state.Target{Checksum: "c1"}, false},
		{"layered, packages only: no OS update", layered, nil, pkgs, nil, false},
		{"container: named by the image, version from cached-update", image, cached, layers, &state.Target{Checksum: img, Version: "41.2"}, false},
		{"container without cached-update: no version", image, nil, layers, &state.Target{Checksum: img}, false},
		{"container, cached-update of another origin: no version", image, &rpmostree.CachedUpdate{Origin: "fedora:os/stable", Version: "9"}, layers,
			&state.Target{Checksum: img}, false},
		{"container, packages only: no OS update", image, nil, pkgs, nil, false},
		{"an update that names nothing", ostree, nil, rpmostree.CheckResult{Available: true}, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &rpmostree.Status{Deployments: []rpmostree.Deployment{c.booted}, CachedUpdate: c.cached}
			got, err := checkTarget(st, c.r)
			if (err != nil) != c.wantErr || (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
				t.Errorf("checkTarget = %+v, %v; want %+v (error %v)", got, err, c.want, c.wantErr)
			}
		})
	}
}

func TestStagedImage(t *testing.T) {
	const img = "ostree-unverified-registry:registry.example/example/os:stable"
	booted := rpmostree.Deployment{Checksum: "c0", ContainerImageReference: img, ContainerImageReferenceDigest: "sha256:b", Booted: true}
	staged := func(ref, digest string) rpmostree.Deployment {
		return rpmostree.Deployment{Checksum: "c1", ContainerImageReference: ref, ContainerImageReferenceDigest: digest, Staged: true, Version: "2"}
	}
	for _, c := range []struct {
		name string
		deps []rpmostree.Deployment
		want *state.Target
	}{
		{"nothing staged", []rpmostree.Deployment{booted}, nil},
		{"the image's update staged: its digest", []rpmostree.Deployment{staged(img, "sha256:n"), booted}, &state.Target{Checksum: "sha256:n", Version: "2"}},
		{"another image staged", []rpmostree.Deployment{staged("ostree-unverified-registry:registry.example/example/os:next", "sha256:n"), booted}, nil},
		{"staged without a digest", []rpmostree.Deployment{staged(img, ""), booted}, nil},
		{"the booted digest again", []rpmostree.Deployment{staged(img, "sha256:b"), booted}, nil},
		{"ostree origin", []rpmostree.Deployment{{Checksum: "c1", Origin: "fedora:os/stable", Staged: true}, {Checksum: "c0", Origin: "fedora:os/stable", Booted: true}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &rpmostree.Status{Deployments: c.deps}
			b, _ := st.Booted()
			got, ok := stagedImage(st, b)
			if ok != (c.want != nil) || (ok && *got != *c.want) {
				t.Errorf("stagedImage = %+v, %v; want %+v", got, ok, c.want)
			}
		})
	}
}

// TestOSAdapterContainerOrigin: on a host booted from an image (the
// stand-in prints upstream's layer diff), the check names the image with
// the cached update's version, staging upgrades it, and the staged digest
// is then the target the check answers and Finalize takes.
func TestOSAdapterContainerOrigin(t *testing.T) {
	ctx := context.Background()
	env, os, stager := host(t)
	img := env.Image("ostree-image-signed:docker://")
	env.BootImage(img)
	if tg, err := os.Check(ctx); err != nil || tg != nil {
		t.Fatalf("check with nothing published: %+v, %v", tg, err)
	}
	env.Publish(env.Ref, 1)
	tg, err := os.Check(ctx)
	if err != nil || tg == nil || *tg != (state.Target{Checksum: img, Version: "1.1"}) {
		t.Fatalf("check: %+v, %v; want the image, version 1.1", tg, err)
	}
	if err := stager.Stage(ctx, *tg); err != nil {
		t.Fatal(err)
	}
	st, err := os.Status(ctx)
	if err != nil || st.Staged == nil || !strings.HasPrefix(st.Staged.Checksum, "sha256:") || st.Staged.Checksum == st.Booted.Checksum {
		t.Fatalf("status after staging: %+v, %v", st, err)
	}
	if tg, err := os.Check(ctx); err != nil || tg == nil || tg.Checksum != st.Staged.Checksum {
		t.Fatalf("check with the update staged: %+v, %v; want %s", tg, err, st.Staged.Checksum)
	}
	if err := os.Finalize(ctx, st.Staged.Checksum); err != nil {
		t.Fatal(err)
	}
}

// TestOSAdapterLayeredHost: on a layered host, newer layered packages
// alone are no OS update (no error either); a new base is, by its commit.
func TestOSAdapterLayeredHost(t *testing.T) {
	ctx := context.Background()
	env, os, _ := host(t)
	if out, stderr, code := env.CLI("", "standin-layer", "layered-cake=2.1-3"); code != 0 {
		t.Fatalf("standin-layer: exit %d\n%s%s", code, out, stderr)
	}
	if err := gofs.WriteFile(filepath.Join(env.UpdateRepo, "standin-rpmmd.json"), []byte(`{"layered-cake": "2.1-4"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if tg, err := os.Check(ctx); err != nil || tg != nil {
		t.Fatalf("check with package updates only: %+v, %v; want none", tg, err)
	}
	want := env.Publish(env.Ref, 1)
	if tg, err := os.Check(ctx); err != nil || tg == nil || tg.Checksum != want {
		t.Fatalf("check with a new base: %+v, %v; want %s", tg, err, want)
	}
}

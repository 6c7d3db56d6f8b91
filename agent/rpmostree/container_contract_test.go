package rpmostree_test

// Contract tests for what upgrade --check and status show per origin: the
// stand-in's output against upstream's (UpstreamCheck, from coreos/rpm-ostree).

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// checkShape is output with the values dropped: the keys, their order and
// their alignment, which is what differs between origins. GPGSignature
// lines are dropped too: the stand-in's remotes do not sign.
func checkShape(out string) []string {
	var s []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		k, _, _ := strings.Cut(l, ":")
		if strings.TrimSpace(k) != "GPGSignature" {
			s = append(s, k)
		}
	}
	return s
}

func checkCLI(t *testing.T, e *standintest.Env) (string, int) {
	t.Helper()
	out, stderr, code := e.CLI(agentUnit, "upgrade", "--check")
	if !strings.Contains(stderr, "Note: --check and --preview may be unreliable.") {
		t.Errorf("upgrade --check stderr = %q", stderr)
	}
	return out, code
}

// upgrade --check on an ostree origin: Version and Commit, as upstream.
func TestCheckOutputOstree(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	e.Publish(e.Ref, 1)
	out, code := checkCLI(t, e)
	if want := checkShape(rpmostree.UpstreamCheck["ostree"]); code != 0 || !slices.Equal(checkShape(out), want) {
		t.Errorf("upgrade --check: exit %d, shape %q, want %q (upstream)\n%s", code, checkShape(out), want, out)
	}
	st := status(t, client(e, agentUnit))
	if c := st.CachedUpdate; c == nil || !c.RefHasNewCommit || c.Origin != "fedora:os/stable" || c.Version != "1.1" {
		t.Errorf("cached-update = %+v", c)
	}
}

// A host booted from a container image, signed or not: status names the
// image and its digest, upgrade --check shows a layer diff and no commit,
// cached-update has the new version, staging upgrades to a new digest and
// finalize-deployment wants that digest.
func TestContainerOrigin(t *testing.T) {
	t.Parallel()
	for _, sig := range []string{"ostree-unverified-registry:", "ostree-image-signed:docker://"} {
		t.Run(sig, func(t *testing.T) {
			t.Parallel()
			e := standintest.New(t, bins)
			c := client(e, agentUnit)
			ctx := context.Background()
			img := e.Image(sig)
			e.BootImage(img)
			b, _ := status(t, c).Booted()
			if b.ContainerImageReference != img || b.Origin != "" || !strings.HasPrefix(b.ContainerImageReferenceDigest, "sha256:") {
				t.Fatalf("booted = %+v; want following %s with a digest, no origin", b, img)
			}
			out, code := checkCLI(t, e)
			if code != 77 || out != "No updates available.\n" {
				t.Errorf("upgrade --check with nothing new: exit %d, %q", code, out)
			}
			if st := status(t, c); st.CachedUpdate != nil {
				t.Errorf("cached-update with nothing new: %+v", st.CachedUpdate)
			}

			e.Publish(e.Ref, 1)
			out, code = checkCLI(t, e)
			if want := checkShape(rpmostree.UpstreamCheck["container"]); code != 0 || !slices.Equal(checkShape(out), want) {
				t.Errorf("upgrade --check: exit %d, shape %q, want %q (upstream)\n%s", code, checkShape(out), want, out)
			}
			if r, err := c.Check(ctx); err != nil || !r.Available || !r.Layers || r.Commit != "" {
				t.Errorf("Check = %+v, %v; want a layer diff without a commit", r, err)
			}
			// The keys coreos/rpm-ostree tests/kolainst/destructive/
			// container-update-check asserts in cached-update.
			js, _, _ := e.CLI(agentUnit, "status", "--json")
			var raw struct {
				Cached map[string]any `json:"cached-update"`
			}
			if err := json.Unmarshal([]byte(js), &raw); err != nil {
				t.Fatal(err)
			}
			md, _ := raw.Cached["manifest-diff"].(map[string]any)
			for _, k := range []string{"n-added", "n-removed", "removed-size", "total-size", "total", "added-size"} {
				if _, ok := md[k]; !ok {
					t.Errorf("cached-update manifest-diff lacks %q: %v", k, raw.Cached)
				}
			}
			if raw.Cached["version"] != "1.1" || raw.Cached["origin"] != img || raw.Cached["ref-has-new-commit"] != false ||
				raw.Cached["checksum"] != b.Checksum {
				t.Errorf("cached-update = %v; want version 1.1, origin %s, the booted checksum, no new commit", raw.Cached, img)
			}

			if res, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageUpgrade}); err != nil || !res.Changed {
				t.Fatalf("Stage = %+v, %v", res, err)
			}
			s := mustStaged(t, c)
			if s.ContainerImageReference != img || s.ContainerImageReferenceDigest == b.ContainerImageReferenceDigest || s.Version != "1.1" {
				t.Fatalf("staged = %+v", s)
			}
			if _, stderr, code := e.CLI(agentUnit, "finalize-deployment", s.Checksum); code != 1 ||
				!strings.Contains(stderr, "Expected staged base checksum "+s.Checksum+", but found "+s.ContainerImageReferenceDigest) {
				t.Errorf("finalize-deployment with the commit: exit %d, %q; want the digest asked for", code, stderr)
			}
			if err := c.Finalize(ctx, s); err != nil {
				t.Fatal(err)
			}
			if !standintest.WaitFor(timeout(t, 5*time.Second), e.Rebooted) {
				t.Fatal("finalize-deployment did not reboot")
			}
			e.PlannedReboot()
			if b, _ := status(t, c).Booted(); b.ContainerImageReferenceDigest != s.ContainerImageReferenceDigest {
				t.Errorf("booted %+v after the reboot, want %s", b, s.ContainerImageReferenceDigest)
			}
			// The cached update was computed for the old deployment.
			if st := status(t, c); st.CachedUpdate != nil {
				t.Errorf("stale cached-update after the reboot: %+v", st.CachedUpdate)
			}
		})
	}
}

// A layered host: newer layered packages alone show a Diff line without
// Version nor Commit (an older one is no update), and a new base shows
// Commit with the Diff; status names the base in base-checksum.
func TestLayeredHost(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e, agentUnit)
	ctx := context.Background()
	if out, stderr, code := e.CLI("", "standin-layer", "layered-cake=2.1-3"); code != 0 {
		t.Fatalf("standin-layer: exit %d\n%s%s", code, out, stderr)
	}
	e.StopDaemon()
	e.StartDaemon()
	b, _ := status(t, c).Booted()
	if b.BaseChecksum == "" || b.BaseChecksum == b.Checksum || b.Target() != b.BaseChecksum {
		t.Fatalf("layered booted = %+v", b)
	}
	rpmmd := func(evr string) {
		if err := os.WriteFile(filepath.Join(e.UpdateRepo, "standin-rpmmd.json"), []byte(`{"layered-cake": "`+evr+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rpmmd("2.1-2")
	if out, code := checkCLI(t, e); code != 77 || out != "No updates available.\n" {
		t.Errorf("upgrade --check with an older package: exit %d, %q", code, out)
	}
	rpmmd("2.1-4")
	out, code := checkCLI(t, e)
	if want := checkShape(rpmostree.UpstreamCheck["layered-only"]); code != 0 || !slices.Equal(checkShape(out), want) || out != rpmostree.UpstreamCheck["layered-only"] {
		t.Errorf("upgrade --check, packages only: exit %d, shape %q, want %q (upstream)\n%s", code, checkShape(out), want, out)
	}
	if r, err := c.Check(ctx); err != nil || !r.PackagesOnly() {
		t.Errorf("Check = %+v, %v; want packages only", r, err)
	}
	e.Publish(e.Ref, 1)
	out, code = checkCLI(t, e)
	if want := checkShape(rpmostree.UpstreamCheck["layered-base"]); code != 0 || !slices.Equal(checkShape(out), want) {
		t.Errorf("upgrade --check, new base: exit %d, shape %q, want %q (upstream)\n%s", code, checkShape(out), want, out)
	}
}

package rpmostree_test

// Contract test for `status --json`: which keys a deployment carries per
// origin, the stand-in's against the fixtures in testdata. Which keys
// upstream sets for which origin is rpmostreed_deployment_generate_variant
// (coreos/rpm-ostree src/daemon/rpmostreed-deployment-utils.cxx): "origin"
// for an ostree ref or a checksum; "container-image-reference" and its
// "-digest" instead for a container image; "base-checksum", "base-version",
// "base-timestamp" and "layered-commit-meta" beside "base-commit-meta" for
// a layered deployment.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// originKeys are the deployment keys whose presence depends on the origin
// and on layering; the others are always there.
var originKeys = []string{"id", "osname", "serial", "checksum", "version", "timestamp", "booted", "staged", "pinned",
	"origin", "container-image-reference", "container-image-reference-digest",
	"base-checksum", "base-version", "base-timestamp", "base-commit-meta", "layered-commit-meta"}

// deploymentKeys returns, for the booted or the staged deployment of a
// status --json, which originKeys it carries.
func deploymentKeys(t *testing.T, js []byte, role string) []string {
	t.Helper()
	var st struct {
		Deployments []map[string]json.RawMessage `json:"deployments"`
	}
	if err := json.Unmarshal(js, &st); err != nil {
		t.Fatal(err)
	}
	for _, d := range st.Deployments {
		if string(d[role]) != "true" {
			continue
		}
		var keys []string
		for _, k := range originKeys {
			if _, ok := d[k]; ok {
				keys = append(keys, k)
			}
		}
		return keys
	}
	t.Fatalf("no %s deployment in\n%s", role, js)
	return nil
}

func TestStatusKeysAsUpstream(t *testing.T) {
	t.Parallel()
	stage := func(t *testing.T, e *standintest.Env) {
		e.Publish(e.Ref, 1)
		if _, err := client(e, agentUnit).Stage(context.Background(), rpmostree.StageRequest{Kind: rpmostree.StageUpgrade}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		fixture string
		roles   []string
		setup   func(*testing.T, *standintest.Env)
	}{
		{"status-ostree-staged.json", []string{"booted", "staged"}, stage},
		{"status-container.json", []string{"booted"}, func(t *testing.T, e *standintest.Env) {
			e.BootImage(e.Image("ostree-unverified-registry:"))
		}},
		{"status-layered.json", []string{"booted", "staged"}, func(t *testing.T, e *standintest.Env) {
			if out, stderr, code := e.CLI("", "standin-layer", "layered-cake=2.1-3"); code != 0 {
				t.Fatalf("standin-layer: exit %d\n%s%s", code, out, stderr)
			}
			e.StopDaemon()
			e.StartDaemon()
			stage(t, e)
		}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			t.Parallel()
			fx, err := os.ReadFile(filepath.Join("testdata", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			e := standintest.New(t, bins)
			tc.setup(t, e)
			js, stderr, code := e.CLI(agentUnit, "status", "--json")
			if code != 0 {
				t.Fatalf("status --json: exit %d\n%s", code, stderr)
			}
			for _, role := range tc.roles {
				if got, want := deploymentKeys(t, []byte(js), role), deploymentKeys(t, fx, role); !slices.Equal(got, want) {
					t.Errorf("%s deployment's keys %q, want %q as %s (upstream)", role, got, want, tc.fixture)
				}
			}
		})
	}
}

package rpmostree_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// TestDeployExactRevision: deploy revision=CHECKSUM stages that commit, not
// what the ref points at now (an update graph's barrier release is behind
// the ref's tip), locked for finalization; a second deploy replaces it.
func TestDeployExactRevision(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	c := client(e, agentUnit)
	ctx := context.Background()
	time.Sleep(1100 * time.Millisecond) // commit timestamps are seconds: keep them apart
	barrier := e.Publish("os/stable", 2)
	time.Sleep(1100 * time.Millisecond)
	tip := e.Publish("os/stable", 3)
	req := rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: barrier, SkipBranchCheck: true}
	if argv := strings.Join(c.StageArgv(req), " "); !strings.Contains(argv, "deploy --lock-finalization --unchanged-exit-77 --disallow-downgrade --skip-branch-check revision="+barrier) {
		t.Fatalf("argv %s", argv)
	}
	if res, err := c.Stage(ctx, req); err != nil || !res.Changed {
		t.Fatalf("deploy barrier = %+v, %v", res, err)
	}
	if d := mustStaged(t, c); d.Checksum != barrier {
		t.Fatalf("staged %s, want the barrier %s (the ref's tip is %s)", d.Checksum, barrier, tip)
	}
	// The graph now offers the tip: deploying it replaces the staged one.
	if res, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: tip, SkipBranchCheck: true}); err != nil || !res.Changed {
		t.Fatalf("deploy tip = %+v, %v", res, err)
	}
	if d := mustStaged(t, c); d.Checksum != tip {
		t.Fatalf("staged %s, want %s", d.Checksum, tip)
	}
	// The same revision again: nothing new, exit 77 (the client's
	// unchanged), the lock untouched.
	if res, err := c.Stage(ctx, rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: tip, SkipBranchCheck: true}); err != nil || res.Changed {
		t.Fatalf("deploy tip again = %+v, %v; want unchanged", res, err)
	}
}

func TestStageArgvGraph(t *testing.T) {
	c := &rpmostree.Client{Path: "/usr/bin/rpm-ostree"}
	for _, tc := range []struct {
		req  rpmostree.StageRequest
		want string
	}{
		{rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: "abc", SkipBranchCheck: true},
			"/usr/bin/rpm-ostree deploy --lock-finalization --unchanged-exit-77 --disallow-downgrade --skip-branch-check revision=abc"},
		{rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: "sha256:0123", SkipBranchCheck: true, AllowDowngrade: true},
			"/usr/bin/rpm-ostree deploy --lock-finalization --unchanged-exit-77 sha256:0123"},
	} {
		if got := strings.Join(c.StageArgv(tc.req), " "); got != tc.want {
			t.Errorf("StageArgv(%+v) = %q, want %q", tc.req, got, tc.want)
		}
	}
}

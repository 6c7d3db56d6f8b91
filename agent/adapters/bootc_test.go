package adapters

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

func TestBootcTarget(t *testing.T) {
	const booted, newer, staged = "sha256:b", "sha256:n", "sha256:s"
	entry := func(d string) *bootc.BootEntry {
		return &bootc.BootEntry{Image: &bootc.ImageStatus{ImageDigest: d, Version: "v-" + d}}
	}
	host := func(staged *bootc.BootEntry, cached string) *bootc.Host {
		h := &bootc.Host{Status: bootc.HostStatus{Booted: entry(booted), Staged: staged}}
		if cached != "" {
			h.Status.Booted.CachedUpdate = &bootc.ImageStatus{ImageDigest: cached, Version: "v-" + cached}
		}
		return h
	}
	for _, tc := range []struct {
		name string
		r    bootc.CheckResult
		h    *bootc.Host
		want *state.Target
	}{
		{"update available", bootc.CheckResult{Available: true, Digest: newer, Version: "2"}, nil, &state.Target{Checksum: newer, Version: "2"}},
		{"nothing", bootc.CheckResult{}, host(nil, ""), nil},
		{"already staged", bootc.CheckResult{}, host(entry(staged), ""), &state.Target{Checksum: staged, Version: "v-" + staged}},
		{"staged lost, cached update", bootc.CheckResult{}, host(nil, newer), &state.Target{Checksum: newer, Version: "v-" + newer}},
		{"cached update is the booted one", bootc.CheckResult{}, host(nil, booted), nil},
		{"staged wins over cached", bootc.CheckResult{}, host(entry(staged), newer), &state.Target{Checksum: staged, Version: "v-" + staged}},
		{"staged is the booted image", bootc.CheckResult{}, host(entry(booted), ""), nil},
		{"no status", bootc.CheckResult{}, nil, nil},
	} {
		got := BootcTarget(tc.r, tc.h)
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%s: BootcTarget = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func bootcHost(t *testing.T) (*standintest.Env, BootcOS, PlainBootcStager) {
	env := standintest.New(t, bin)
	c := &bootc.Client{Path: bin.Bootc, Runner: oplog.Runner{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Env: env.BootcEnv()}}
	rpm := &rpmostree.Client{Path: bin.RpmOstree, Runner: oplog.Runner{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Env: env.ClientEnv("")}}
	return env, BootcOS{Client: c, RpmOstree: rpm, ApplyWait: time.Second}, PlainBootcStager{Client: c}
}

// TestBootcFinalizeChecksFirst: --from-downloaded unlocks whatever is
// staged, so Finalize refuses, without running it, a staged deployment that
// is not the locked target or no longer download-only; the target, it
// applies (the reboot under way); Cleanup discards.
func TestBootcFinalizeChecksFirst(t *testing.T) {
	t.Parallel()
	env, o, s := bootcHost(t)
	ctx := context.Background()
	env.Publish(env.Ref, 1)
	target, err := o.Check(ctx)
	if err != nil || target == nil {
		t.Fatalf("check: %v %v", target, err)
	}
	if err := s.Stage(ctx, *target); err != nil {
		t.Fatal(err)
	}
	if err := o.Finalize(ctx, "sha256:other"); err == nil || !strings.Contains(err.Error(), "staged is "+target.Checksum) {
		t.Errorf("finalize of another digest: %v", err)
	}
	if _, _, code := env.Bootc(nil, "upgrade"); code != 0 { // unlocks it (as an operator's plain upgrade would)
		t.Fatal("plain upgrade failed")
	}
	if err := o.Finalize(ctx, target.Checksum); err == nil || !strings.Contains(err.Error(), "not download-only") {
		t.Errorf("finalize of an unlocked deployment: %v", err)
	}
	if env.Rebooted() {
		t.Fatal("a refused finalize rebooted")
	}
	if err := s.Stage(ctx, *target); err != nil { // re-locks it
		t.Fatal(err)
	}
	if err := o.Finalize(ctx, target.Checksum); err != nil || !env.Rebooted() {
		t.Fatalf("finalize: %v, rebooted %v", err, env.Rebooted())
	}
	if err := o.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := o.Status(ctx); err != nil || st.Staged != nil {
		t.Fatalf("after cleanup: %+v %v", st, err)
	}
	if err := o.Finalize(ctx, target.Checksum); !errors.Is(err, engine.ErrNoStagedDeployment) {
		t.Errorf("finalize with nothing staged: %v", err)
	}
}

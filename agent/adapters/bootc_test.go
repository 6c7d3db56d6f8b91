package adapters

import (
	"testing"

	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/agent/state"
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

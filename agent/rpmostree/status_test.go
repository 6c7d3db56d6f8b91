package rpmostree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/oplog"
)

func loadStatus(t *testing.T, name string) *Status {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestParseOstreeOrigin(t *testing.T) {
	st := loadStatus(t, "status-ostree-staged.json")
	staged, ok := st.Staged()
	if !ok || staged.Version != "39.20240210.3.0" || staged.Serial != 0 || staged.OSName != "fedora-coreos" {
		t.Fatalf("staged = %+v, %v", staged, ok)
	}
	if staged.Origin != "fedora:fedora/x86_64/coreos/stable" || staged.Timestamp != 1707571458 {
		t.Errorf("origin/timestamp = %q/%d", staged.Origin, staged.Timestamp)
	}
	booted, ok := st.Booted()
	if !ok || booted.Version != "39.20240128.3.0" {
		t.Fatalf("booted = %+v, %v", booted, ok)
	}
	if sum, err := staged.FinalizeChecksum(); err != nil || sum != staged.Checksum {
		t.Errorf("FinalizeChecksum = %q, %v; want checksum %q", sum, err, staged.Checksum)
	}
	if staged.FinalizationLocked != nil {
		t.Errorf("finalization-locked absent in JSON but parsed as %v", *staged.FinalizationLocked)
	}
	want := &UpdateDriver{Name: "update-agent", Unit: "update-agent.service"}
	if !reflect.DeepEqual(st.UpdateDriver, want) {
		t.Errorf("update-driver = %+v", st.UpdateDriver)
	}
	if st.Transaction != nil {
		t.Errorf("transaction = %+v, want nil", st.Transaction)
	}
}

func TestParseContainerOrigin(t *testing.T) {
	st := loadStatus(t, "status-container.json")
	if _, ok := st.Staged(); ok {
		t.Fatal("nothing is staged")
	}
	b, ok := st.Booted()
	if !ok || !b.IsContainer() {
		t.Fatalf("booted = %+v", b)
	}
	sum, err := b.FinalizeChecksum()
	if err != nil || sum != "sha256:8c2a6c1b9d7e5f3a1c0e2d4b6f8a9c7e5d3b1a0f2e4c6d8b9a7f5e3c1d0b2a4f" {
		t.Errorf("FinalizeChecksum = %q, %v; want the image digest", sum, err)
	}
	want := &Transaction{Method: "UpdateDeployment", Sender: ":1.214", Path: "/org/projectatomic/rpmostree1/rhcos"}
	if !reflect.DeepEqual(st.Transaction, want) {
		t.Errorf("transaction = %+v", st.Transaction)
	}
	if st.UpdateDriver != nil {
		t.Errorf("update-driver = %+v, want nil", st.UpdateDriver)
	}
	b.ContainerImageReferenceDigest = ""
	if _, err := b.FinalizeChecksum(); !errors.Is(err, ErrNoDigest) {
		t.Errorf("no digest: err = %v, want ErrNoDigest", err)
	}
}

func TestParseLayered(t *testing.T) {
	st := loadStatus(t, "status-layered.json")
	s, ok := st.Staged()
	if !ok {
		t.Fatal("no staged deployment")
	}
	sum, _ := s.FinalizeChecksum()
	if sum != "3a9c1e7b5d2f4a6c8e0b9d7f5a3c1e2b4d6f8a0c9e7b5d3f1a2c4e6b8d0f9a7c" {
		t.Errorf("FinalizeChecksum = %q, want base-checksum", sum)
	}
	if s.FinalizationLocked == nil || !*s.FinalizationLocked || s.Serial != 1 {
		t.Errorf("finalization-locked/serial = %v/%d", s.FinalizationLocked, s.Serial)
	}
	b, _ := st.Booted()
	if !b.Pinned || b.BaseChecksum == "" {
		t.Errorf("booted = %+v", b)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{`{`, `{"transaction": ["a"]}`, `{"deployments": {}}`} {
		if _, err := ParseStatus([]byte(in)); err == nil {
			t.Errorf("ParseStatus(%s) = nil error", in)
		}
	}
}

func TestStageArgv(t *testing.T) {
	c := &Client{Path: "/usr/bin/rpm-ostree"}
	cases := []struct {
		req    StageRequest
		bypass bool
		want   string
	}{
		{StageRequest{}, false, "/usr/bin/rpm-ostree upgrade --lock-finalization --unchanged-exit-77"},
		{StageRequest{AllowDowngrade: true}, false, "/usr/bin/rpm-ostree upgrade --lock-finalization --unchanged-exit-77 --allow-downgrade"},
		{StageRequest{Kind: StageDeploy, Checksum: "abc"}, true, "/usr/bin/rpm-ostree deploy --lock-finalization --unchanged-exit-77 --disallow-downgrade revision=abc --bypass-driver"},
		{StageRequest{Kind: StageDeploy, Checksum: "abc", AllowDowngrade: true}, false, "/usr/bin/rpm-ostree deploy --lock-finalization --unchanged-exit-77 revision=abc"},
		{StageRequest{Kind: StageRebase, Ref: "fedora:fedora/x86_64/coreos/next"}, false, "/usr/bin/rpm-ostree rebase --lock-finalization --disallow-downgrade fedora:fedora/x86_64/coreos/next"},
		{StageRequest{Kind: StageRebase, Ref: "fedora:x", AllowDowngrade: true}, false, "/usr/bin/rpm-ostree rebase --lock-finalization fedora:x"},
		// zincati's rebase to an OCI release: REFSPEC REVISION (src/rpm_ostree/cli_deploy.rs).
		{StageRequest{Kind: StageRebase, Ref: "ostree-unverified-registry:quay.example/os:stable", Revision: "sha256:ab"}, false,
			"/usr/bin/rpm-ostree rebase --lock-finalization --disallow-downgrade ostree-unverified-registry:quay.example/os:stable sha256:ab"},
	}
	for _, tc := range cases {
		c.BypassDriver = tc.bypass
		if got := strings.Join(c.StageArgv(tc.req), " "); got != tc.want {
			t.Errorf("StageArgv(%v) = %q, want %q", tc.req, got, tc.want)
		}
	}
	env := (&Client{Runner: oplog.Runner{Env: []string{"A=b"}}}).StageEnv()
	if !reflect.DeepEqual(env, []string{"A=b", "RPMOSTREE_CLIENT_ID=update-agent"}) {
		t.Errorf("StageEnv = %q", env)
	}
	if (&Client{}).StageArgv(StageRequest{})[0] != "rpm-ostree" {
		t.Error("default path is not rpm-ostree")
	}
	for _, bad := range []StageRequest{{Kind: StageDeploy}, {Kind: StageRebase}, {Kind: 9}} {
		if bad.Validate() == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
}

func TestStageOutcome(t *testing.T) {
	cases := []struct {
		code    int
		out     string
		changed bool
		ok      bool
	}{
		{0, "Staging deployment... done\nRun \"systemctl reboot\" to start a reboot\n", true, true},
		{0, "No change.\n", false, true},
		{0, "No upgrade available.\n", false, true},
		{77, "No upgrade available.\n", false, true},
		{1, "", false, false},
	}
	for _, c := range cases {
		r, ok := StageOutcome(c.code, []byte(c.out))
		if ok != c.ok || r.Changed != c.changed {
			t.Errorf("StageOutcome(%d, %q) = %+v, %v", c.code, c.out, r, ok)
		}
	}
}

func TestClassify(t *testing.T) {
	cases := map[string]error{
		"error: No pending staged deployment found\n":                                        ErrNoStagedDeployment,
		"error: Expected staged base checksum abc, but found def\n":                          ErrChecksumMismatch,
		"error: Reboot blocked by a systemd inhibitor lock in `block` mode\nHeld by: etcd\n": ErrInhibited,
		"error: Staged deployment already unlocked\n":                                        ErrAlreadyUnlocked,
		"error: Updates and deployments are driven by zincati (zincati.service)\n":           ErrDriverRegistered,
		"error: Transaction in progress: upgrade\n":                                          ErrBusy,
	}
	for stderr, want := range cases {
		err := classify(&oplog.Error{Argv: []string{"rpm-ostree"}, ExitCode: 1, Stderr: stderr})
		var oe *oplog.Error
		if !errors.Is(err, want) || !errors.As(err, &oe) {
			t.Errorf("classify(%q) = %v, want %v wrapping *oplog.Error", stderr, err, want)
		}
	}
	plain := &oplog.Error{ExitCode: 1, Stderr: "error: something else"}
	if err := classify(plain); err != error(plain) {
		t.Errorf("unknown stderr changed the error: %v", err)
	}
}

func TestParseCheckOstree(t *testing.T) {
	out := "AvailableUpdate:\n        Version: 39.20240210.3.0 (2024-02-10T13:24:18Z)\n         Commit: 6b6fc6a3\n   GPGSignature: Valid signature\n"
	r := ParseCheck([]byte(out))
	if !r.Available || r.Version != "39.20240210.3.0" || r.Commit != "6b6fc6a3" {
		t.Errorf("got %+v", r)
	}
}

func TestStagedChanged(t *testing.T) {
	none := loadStatus(t, "status-container.json")
	staged := loadStatus(t, "status-ostree-staged.json")
	other := loadStatus(t, "status-layered.json")
	cases := []struct {
		name          string
		before, after *Status
		want          bool
	}{
		{"nothing before, staged after", none, staged, true},
		{"same staged", staged, staged, false},
		{"replaced", staged, other, true},
		{"nothing after", staged, none, false},
		{"nothing at all", none, none, false},
	}
	for _, c := range cases {
		if got := StagedChanged(c.before, c.after); got != c.want {
			t.Errorf("%s: got %v", c.name, got)
		}
	}
}

// TestStatusReadBounded: a status --json past MaxStatusJSON (a real child
// printing more) is an error naming the bound, not a document read whole
// or parsed cut.
func TestStatusReadBounded(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rpm-ostree")
	script := fmt.Sprintf("#!/bin/sh\nprintf '{\"deployments\": [], \"pad\": \"'\nhead -c %d /dev/zero | tr '\\000' x\nprintf '\"}'\n", MaxStatusJSON)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Client{Path: bin, Runner: oplog.Runner{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	_, err := c.Status(context.Background())
	if !errors.Is(err, oplog.ErrStdoutTooLong) || !strings.Contains(err.Error(), "reading rpm-ostree status") ||
		!strings.Contains(err.Error(), fmt.Sprintf("past the bound of %d", MaxStatusJSON)) {
		t.Fatalf("err = %v; want ErrStdoutTooLong naming the bound", err)
	}
}

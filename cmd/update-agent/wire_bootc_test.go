package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/agent/config"
	si "github.com/update-agent/update-agent/tests/rpmostree/standin"
)

// updates.backend = "auto" picks bootc on an image-mode host and rpm-ostree
// elsewhere; a bootc without --download-only is refused, saying what is
// needed. Not parallel: the stand-in's environment is this process's.
func TestWireBackend(t *testing.T) {
	bin := useStandin(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name, backend, bootcPath, source string
		env                              []string
		want, errSub                     string
	}{
		{name: "auto on an image-mode host", backend: "auto", bootcPath: bin.Bootc, want: "bootc"},
		{name: "auto on a package-mode host", backend: "auto", bootcPath: bin.Bootc, env: []string{si.EnvBootcPackageMode + "=1"}, want: "rpm-ostree"},
		{name: "auto without bootc", backend: "auto", bootcPath: "/nonexistent/bootc", want: "rpm-ostree"},
		{name: "auto with the image source", backend: "auto", bootcPath: bin.Bootc, source: "image", want: "rpm-ostree"},
		{name: "rpm-ostree configured", backend: "rpm-ostree", bootcPath: bin.Bootc, want: "rpm-ostree"},
		{name: "bootc too old", backend: "auto", bootcPath: bin.Bootc, env: []string{si.EnvBootcVersion + "=1.11.0"},
			errSub: "bootc 1.11.0 is installed, the agent needs bootc >= 1.12.0"},
		{name: "bootc status unreadable", backend: "auto", bootcPath: brokenBootc(t),
			errSub: "choosing the update backend (updates.backend = \"auto\")"},
		{name: "bootc version unreadable", backend: "bootc", bootcPath: brokenBootc(t), errSub: "updates.backend bootc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range append([]string{si.EnvBootcPackageMode + "=", si.EnvBootcVersion + "="}, tc.env...) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			cfg := config.Default()
			cfg.Agent.NodeName = "n1"
			cfg.Agent.RPMOstree, cfg.Agent.Bootc = bin.RpmOstree, tc.bootcPath
			cfg.Updates.Backend, cfg.Lock.Enabled = tc.backend, false
			if tc.source != "" {
				cfg.Updates.Source, cfg.Updates.Image = tc.source, "ostree-unverified-registry:example.invalid/os:1"
			}
			a, err := wire(cfg, t.TempDir(), log, nil, nil)
			if tc.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSub) {
					t.Fatalf("err = %v, want %q", err, tc.errSub)
				}
				if strings.Contains(tc.name, "too old") && !errors.Is(err, bootc.ErrTooOld) {
					t.Errorf("err = %v, not bootc.ErrTooOld", err)
				}
				// Restarting does not change bootc: systemd must not
				// restart into it every RestartSec.
				if code := exitCode(err, io.Discard); code != exitBadConfig {
					t.Errorf("exit %d, want %d (EX_CONFIG)", code, exitBadConfig)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer a.close()
			if a.backend.Name != tc.want {
				t.Fatalf("backend %q (%s), want %q", a.backend.Name, a.backend.Reason, tc.want)
			}
			_, isBootc := a.osPort.(adapters.BootcOS)
			_, stagesBootc := a.stagerPort.(*adapters.BootcStager)
			if isBootc != (tc.want == "bootc") || stagesBootc != isBootc {
				t.Errorf("engine ports %T %T for backend %s", a.osPort, a.stagerPort, tc.want)
			}
		})
	}
}

// brokenBootc is a bootc that fails every command, as one whose status
// cannot be read.
func brokenBootc(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "bootc")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho 'error: broken' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDoctorBackend: doctor reports the backend it would use, and why.
func TestDoctorBackend(t *testing.T) {
	bin := useStandin(t)
	conf := func(bootcPath string) string {
		return "[agent]\nrpm_ostree = \"" + bin.RpmOstree + "\"\nbootc = \"" + bootcPath + "\"\n[lock]\nenabled = false\n[staging]\npaths = []\n"
	}
	for _, tc := range []struct{ bootcPath, want string }{
		{bin.Bootc, "ok    backend        bootc: bootc manages this host (booted fedora/os/stable); bootc 1.12.0, follows registry:fedora/os/stable, booted sha256:"},
		{"/nonexistent/bootc", "ok    backend        rpm-ostree: bootc is not installed"},
	} {
		root := configRoot(t, map[string]string{"50-test.toml": conf(tc.bootcPath)})
		_, out, stderr := runIn("doctor", "--root", root)
		if !strings.Contains(out, tc.want) {
			t.Errorf("doctor output lacks %q:\n%s%s", tc.want, out, stderr)
		}
	}
}

// A bootc whose status cannot be read exits 78 without the stand-in too
// (TestWireBackend skips where ostree is missing).
func TestWireBackendBrokenBootcExits78(t *testing.T) {
	cfg := config.Default()
	cfg.Agent.Bootc = brokenBootc(t)
	for _, backend := range []string{"auto", "bootc"} {
		cfg.Updates.Backend = backend
		err := (&agent{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}).wireBackend(nil)
		if code := exitCode(err, io.Discard); code != exitBadConfig {
			t.Errorf("backend %s: exit %d (%v), want %d", backend, code, err, exitBadConfig)
		}
	}
}

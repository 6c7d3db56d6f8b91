package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const etcConfD = "etc/update-agent/config.d"

// configRoot makes a temp root with the given fragments in /etc.
func configRoot(t *testing.T, frags map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, etcConfD)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range frags {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// runIn runs a subcommand in-process and returns exit code and output.
func runIn(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	env := &cmdEnv{stdout: &out, stderr: &errb}
	code = exitCode(run(env, args), &errb)
	return code, out.String(), errb.String()
}

func TestCheckConfigExitCodes(t *testing.T) {
	good := configRoot(t, map[string]string{"50-lock.toml": "[lock]\nslots = 2\n", "README": "x"})
	bad := configRoot(t, map[string]string{
		"50-lock.toml": "[lock]\nslots = 0\nslot = 1\n",
		"60-x.toml":    "[staging]\nnice = 99\n",
	})
	tests := []struct {
		name     string
		args     []string
		code     int
		out, err []string
		noOut    bool
	}{
		{"valid config prints it with sources", []string{"check-config", "--root", good}, exitOK,
			[]string{"slots = 2  # " + filepath.Join(good, etcConfD, "50-lock.toml"), "group = \"default\"  # default", "[metrics]"},
			[]string{"warning: " + filepath.Join(good, etcConfD, "README") + ": ignored"}, false},
		{"no config at all is the defaults", []string{"check-config", "-root", t.TempDir()}, exitOK,
			[]string{"built-in defaults only", "slots = 1  # default"}, nil, false},
		{"bad config lists every error", []string{"check-config", "--root", bad}, exitBadConfig, nil,
			[]string{
				"error: " + filepath.Join(bad, etcConfD, "50-lock.toml") + ": lock.slots: must be >= 1, got 0",
				"error: " + filepath.Join(bad, etcConfD, "50-lock.toml") + ": lock.slot: unknown key",
				"error: " + filepath.Join(bad, etcConfD, "60-x.toml") + ": staging.nice: must be -20-19, got 99",
				"configuration is invalid: 3 error(s)",
			}, true},
		{"extra argument", []string{"check-config", "extra"}, exitUsage, nil, []string{"unexpected arguments"}, true},
		{"unknown flag", []string{"check-config", "--rooot", "/"}, exitUsage, nil, []string{"flag provided but not defined"}, true},
		{"help", []string{"check-config", "-h"}, exitOK, nil, []string{"-root"}, true},
		{"daemon refuses a bad config", []string{"daemon", "--root", bad}, exitBadConfig, nil,
			[]string{"bad configuration", "lock.slots: must be >= 1, got 0"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runIn(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, out, errs)
			}
			for _, w := range tt.out {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.err {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
			if tt.noOut && out != "" {
				t.Errorf("unexpected stdout:\n%s", out)
			}
		})
	}
}

// TestCheckConfigOutputLoadsBack: what check-config prints is a valid
// fragment giving the same configuration.
func TestCheckConfigOutputLoadsBack(t *testing.T) {
	root := configRoot(t, map[string]string{"50-x.toml": "[reboot]\nstrategy = \"periodic\"\n[[reboot.windows]]\ndays = [\"Sat\"]\nstart = \"01:00\"\nlength = \"2h\"\n"})
	code, out, errs := runIn("check-config", "--root", root)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	again := configRoot(t, map[string]string{"00-all.toml": out})
	code, out2, errs := runIn("check-config", "--root", again)
	if code != exitOK {
		t.Fatalf("reloading: exit %d: %s", code, errs)
	}
	// Same values; only the source comments differ.
	strip := func(s string) string {
		var lines []string
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			l, _, _ = strings.Cut(l, "  # ")
			lines = append(lines, l)
		}
		return strings.Join(lines, "\n")
	}
	if strip(out) != strip(out2) {
		t.Errorf("differs:\n%s\n---\n%s", out, out2)
	}
}

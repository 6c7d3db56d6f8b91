package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/tests/etcdtest"
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
	member := configRoot(t, map[string]string{"50-nolock.toml": "[lock]\nenabled = false\n[etcd]\nlocal_unit = \"etcd.service\"\n"})
	memberErr := filepath.Join(member, etcConfD, "50-nolock.toml") + `: lock.enabled: must be true on a host that runs an etcd member (etcd.local_unit = "etcd.service")`
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
		{"two files", []string{"check-config", "a.toml", "b.toml"}, exitUsage, nil, []string{"expected at most one FILE"}, true},
		{"unknown flag", []string{"check-config", "--rooot", "/"}, exitUsage, nil, []string{"flag provided but not defined"}, true},
		{"help", []string{"check-config", "-h"}, exitOK, nil, []string{"-root"}, true},
		{"no lock on a member host: check-config says so", []string{"check-config", "--root", member}, exitBadConfig, nil,
			[]string{"error: " + memberErr}, true},
		{"no lock on a member host: the daemon refuses it", []string{"daemon", "--root", member}, exitBadConfig, nil,
			[]string{memberErr}, true},
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

// TestStartupFileErrors: TLS and password files that only fail when the etcd
// client is built are reported by check-config with file and key, and the
// daemon exits 78 on them (systemd does not restart into them).
func TestStartupFileErrors(t *testing.T) {
	pki := etcdtest.NewPKI(t)
	frag := "[etcd]\nendpoints = [\"https://10.0.0.1:2379\"]\nca_file = \"/etc/etcd/ca.pem\"\n" +
		"cert_file = \"/etc/etcd/client.pem\"\nkey_file = \"/etc/etcd/client-key.pem\"\n" +
		"username = \"ua\"\npassword_file = \"/etc/etcd/password\"\n"
	root := configRoot(t, map[string]string{"50-etcd.toml": frag})
	os.MkdirAll(filepath.Join(root, "etc/etcd"), 0o755)
	cert, _ := os.ReadFile(pki.ClientCertFile)
	otherKey, _ := os.ReadFile(pki.OtherKey)
	for name, f := range map[string]struct {
		content []byte
		mode    os.FileMode
	}{
		"ca.pem":         {[]byte("not a certificate\n"), 0o644},
		"client.pem":     {cert, 0o644},
		"client-key.pem": {otherKey, 0o600}, // not the certificate's key
		"password":       {[]byte("pw\n"), 0o644},
	} {
		p := filepath.Join(root, "etc/etcd", name)
		if err := os.WriteFile(p, f.content, f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode)
	}
	file := filepath.Join(root, etcConfD, "50-etcd.toml")
	code, _, errs := runIn("check-config", "--root", root)
	if code != exitBadConfig {
		t.Errorf("check-config: exit %d, want %d\n%s", code, exitBadConfig, errs)
	}
	for _, want := range []string{
		file + `: etcd.ca_file: no PEM certificate in "/etc/etcd/ca.pem"`,
		file + `: etcd.key_file: "/etc/etcd/client-key.pem" and etcd.cert_file "/etc/etcd/client.pem" are not a matching PEM key pair`,
		file + `: etcd.password_file: "/etc/etcd/password" is open to group or others (mode 0644)`,
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("check-config stderr lacks %q:\n%s", want, errs)
		}
	}
	if code, _, errs := runIn("daemon", "--root", root); code != exitBadConfig {
		t.Errorf("daemon: exit %d, want %d\n%s", code, exitBadConfig, errs)
	}

	plain := configRoot(t, map[string]string{"50-etcd.toml": "[etcd]\nendpoints = [\"http://10.0.0.1:2379\"]\nusername = \"ua\"\npassword_file = \"/etc/etcd/password\"\n"})
	os.MkdirAll(filepath.Join(plain, "etc/etcd"), 0o755)
	os.WriteFile(filepath.Join(plain, "etc/etcd/password"), []byte("pw\n"), 0o600)
	code, _, errs = runIn("check-config", "--root", plain)
	if want := filepath.Join(plain, etcConfD, "50-etcd.toml") + ": etcd.password_file: a password is never sent over plain http"; code != exitBadConfig || !strings.Contains(errs, want) {
		t.Errorf("password over http: exit %d, want %d and %q\n%s", code, exitBadConfig, want, errs)
	}
}

// TestEtcdClientConfigErrorExits78: a file that turns bad between the
// configuration check and the client's construction still exits 78.
func TestEtcdClientConfigErrorExits78(t *testing.T) {
	_, err := etcdclient.Options{Endpoints: []string{"https://x:2379"}, CAFile: filepath.Join(t.TempDir(), "gone.pem")}.Config()
	if code := exitCode(fmt.Errorf("setting up the etcd client: %w", err), io.Discard); code != exitBadConfig {
		t.Errorf("exit %d for %v, want %d", code, err, exitBadConfig)
	}
}

// TestCheckConfigFile: a fragment not installed yet is checked where it
// would go: merged with the installed fragments (replacing one of its name),
// or over the defaults only with --alone; stderr says which.
func TestCheckConfigFile(t *testing.T) {
	root := configRoot(t, map[string]string{"50-lock.toml": "[lock]\nslots = 3\n", "70-etcd.toml": "[etcd]\nendpoints = [\"https://e1:2379\"]\n"})
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	group := write("60-group.toml", "[lock]\ngroup = \"workers\"\n")
	code, out, errOut := runIn("check-config", "--root", root, group)
	if code != exitOK || !strings.Contains(errOut, "merged with the defaults and the installed fragments") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, w := range []string{"slots = 3", `group = "workers"`, group, "https://e1:2379"} {
		if !strings.Contains(out, w) {
			t.Errorf("merged output lacks %q:\n%s", w, out)
		}
	}
	code, out, errOut = runIn("check-config", "--root", root, "--alone", group)
	if code != exitOK || !strings.Contains(errOut, "merged with the defaults only") || strings.Contains(out, "slots = 3") {
		t.Fatalf("--alone: exit %d, stderr:\n%s\nstdout:\n%s", code, errOut, out)
	}
	// Same name as an installed fragment: it replaces it, as it would in /etc.
	slots := write("50-lock.toml", "[lock]\nslots = 0\n")
	code, _, errOut = runIn("check-config", "--root", root, slots)
	if code != exitBadConfig || !strings.Contains(errOut, slots+": lock.slots: must be >= 1, got 0") {
		t.Fatalf("bad fragment: exit %d, stderr:\n%s", code, errOut)
	}
	if code, _, errOut = runIn("check-config", "--root", root, write("60-x.conf", "")); code != exitBadConfig || !strings.Contains(errOut, "only *.toml files are read") {
		t.Fatalf("a non-toml name: exit %d, stderr:\n%s", code, errOut)
	}
	if code, _, _ = runIn("check-config", "--root", root, "--alone"); code != exitUsage {
		t.Fatalf("--alone without FILE: exit %d", code)
	}
}

func TestVersionFlag(t *testing.T) {
	_, want, _ := runIn("version")
	code, out, errOut := runIn("--version")
	if code != exitOK || out != want || want == "" {
		t.Fatalf("--version: exit %d, %q (version: %q), stderr %q", code, out, want, errOut)
	}
}

// TestCheckConfigZincatiGraph: on a host with zincati's graph and no
// updates.source, check-config shows "graph" with the zincati file it came
// from and says so on stderr; with the source set, neither.
func TestCheckConfigZincatiGraph(t *testing.T) {
	for _, tt := range []struct {
		name, frag, source string
		derived            bool
	}{
		{"source unset", "[lock]\nslots = 1\n", `source = "graph"  # ZFILE`, true},
		{"source set", "[updates]\nsource = \"origin\"\n", `source = "origin"  # `, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := configRoot(t, map[string]string{"50-x.toml": tt.frag})
			zf := filepath.Join(root, "usr/lib/zincati/config.d/50-fedora-coreos-cincinnati.toml")
			if err := os.MkdirAll(filepath.Dir(zf), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(zf, []byte("[cincinnati]\nbase_url = \"https://updates.example\"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := runIn("check-config", "--root", root)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if want := strings.ReplaceAll(tt.source, "ZFILE", zf); !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
			if got := strings.Contains(errOut, "default from the host: updates.source = \"graph\""); got != tt.derived {
				t.Errorf("stderr says where the default came from: %v, want %v:\n%s", got, tt.derived, errOut)
			}
		})
	}
}

// TestDaemonLogsZincatiDefault: the daemon's journal says where a default
// taken from the host came from, before anything else can stop it (here a
// bad key: exit 78 after the line).
func TestDaemonLogsZincatiDefault(t *testing.T) {
	for _, tt := range []struct {
		name, zincati string
		logged        bool
	}{
		{"zincati's graph", "[cincinnati]\nbase_url = \"https://updates.example\"\n", true},
		{"no graph", "[identity]\ngroup = \"default\"\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := configRoot(t, map[string]string{"50-x.toml": "[lock]\nslots = 0\n"})
			zf := filepath.Join(root, "usr/lib/zincati/config.d/50-fedora-coreos-cincinnati.toml")
			if err := os.MkdirAll(filepath.Dir(zf), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(zf, []byte(tt.zincati), 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, errOut := runIn("daemon", "--root", root)
			if code != exitBadConfig {
				t.Fatalf("exit %d, want %d: %s", code, exitBadConfig, errOut)
			}
			line := `configuration default from the host" default="updates.source = \"graph\" (not set by any fragment) from zincati's configuration ` + zf
			if got := strings.Contains(errOut, line); got != tt.logged {
				t.Errorf("logged %v, want %v:\n%s", got, tt.logged, errOut)
			}
		})
	}
}

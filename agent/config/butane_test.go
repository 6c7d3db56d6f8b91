package config

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

// butaneFile is the Fedora CoreOS provisioning example.
const butaneFile = examplesDir + "/fedora-coreos/update-agent.bu"

// butane is the part of Butane's fcos spec the example uses; strict
// decoding makes a misspelt field (enable: for enabled:) an error.
type butane struct {
	Variant string `yaml:"variant"`
	Version string `yaml:"version"`
	Storage struct {
		Files []struct {
			Path     string `yaml:"path"`
			Mode     int    `yaml:"mode"`
			Contents struct {
				Inline string `yaml:"inline"`
				Local  string `yaml:"local"`
			} `yaml:"contents"`
		} `yaml:"files"`
	} `yaml:"storage"`
	Systemd struct {
		Units []struct {
			Name     string `yaml:"name"`
			Enabled  bool   `yaml:"enabled"`
			Mask     bool   `yaml:"mask"`
			Contents string `yaml:"contents"`
		} `yaml:"units"`
	} `yaml:"systemd"`
}

// TestButaneExample: the Butane file is fcos 1.5.0, writes only under
// /etc, masks zincati, layers the agent only where it is missing and
// enables it once layered, after check-config; the fragments it writes
// load with the package's defaults on a Fedora CoreOS tree (zincati's
// graph fragment present) and validate, following the graph, and every
// file they name is written by it.
func TestButaneExample(t *testing.T) {
	data, err := os.ReadFile(butaneFile)
	if err != nil {
		t.Fatal(err)
	}
	var bu butane
	if err := yaml.UnmarshalStrict(data, &bu); err != nil {
		t.Fatalf("%s: %v", butaneFile, err)
	}
	if bu.Variant != "fcos" || bu.Version != "1.5.0" {
		t.Errorf("variant %q version %q, want fcos 1.5.0", bu.Variant, bu.Version)
	}

	defaults, err := os.ReadFile(defaultsFile)
	if err != nil {
		t.Fatal(err)
	}
	pems := newTestPEM(t)
	tree := map[string]string{
		usrDir + "00-defaults.toml":                                  string(defaults),
		"/usr/lib/zincati/config.d/50-fedora-coreos-cincinnati.toml": fcosGraph,
	}
	written := map[string]bool{}
	var frags []string
	for _, f := range bu.Storage.Files {
		if !strings.HasPrefix(f.Path, "/etc/") {
			t.Errorf("storage.files: %s is not under /etc (the rest of the tree is the OS's, or /var)", f.Path)
		}
		written[f.Path] = true
		switch {
		case f.Contents.Local != "":
			// A certificate or key from --files-dir: a test one here.
			kind := "cert_file"
			if strings.HasSuffix(f.Path, ".key") {
				kind = "key_file"
			}
			tree[f.Path] = pems.content(kind)
		default:
			tree[f.Path] = f.Contents.Inline
		}
		if strings.HasPrefix(f.Path, etcDir) {
			if !strings.HasSuffix(f.Path, ".toml") {
				t.Errorf("%s: the agent reads only *.toml", f.Path)
			}
			frags = append(frags, f.Path)
		}
		if strings.HasSuffix(f.Path, ".key") && f.Mode != 0o600 {
			t.Errorf("%s: mode %o, want 0600", f.Path, f.Mode)
		}
	}
	if len(frags) == 0 {
		t.Fatalf("no fragment under %s", etcDir)
	}
	for _, p := range frags {
		for key, file := range referencedFiles(t, []byte(tree[p])) {
			if !written[file] {
				t.Errorf("%s: %s = %q, which the Butane file does not write", p, key, file)
			}
		}
	}
	root := writeTree(t, tree)
	cfg, src, err := Load(root)
	if err != nil {
		t.Fatalf("the fragments it writes: %v", err)
	}
	if err := cfg.CheckDaemon(); err != nil {
		t.Errorf("the daemon's own rules: %v", err)
	}
	if len(src.Warnings) > 0 {
		t.Errorf("warnings: %q", src.Warnings)
	}
	if cfg.Updates.Source != SourceGraph || cfg.Cincinnati.BaseURL == "" {
		t.Errorf("updates.source %q base_url %q: want zincati's graph (the example leaves the source unset)", cfg.Updates.Source, cfg.Cincinnati.BaseURL)
	}

	units := map[string]int{}
	for i, u := range bu.Systemd.Units {
		units[u.Name] = i
	}
	unit := func(name string) (enabled, mask bool, contents string) {
		i, ok := units[name]
		if !ok {
			t.Errorf("no systemd unit %s", name)
			return
		}
		u := bu.Systemd.Units[i]
		return u.Enabled, u.Mask, u.Contents
	}
	if _, mask, _ := unit("zincati.service"); !mask {
		t.Error("zincati.service is not masked")
	}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"update-agent-layer.service", []string{"ConditionPathExists=!/usr/bin/update-agent", "ExecStart=/usr/bin/rpm-ostree install --idempotent", "reboot", "WantedBy=multi-user.target"}},
		{"update-agent-enable.service", []string{"ConditionPathExists=/usr/bin/update-agent", "ExecStartPre=/usr/bin/update-agent check-config",
			"ExecStart=/usr/bin/systemctl enable --now update-agent.service", "WantedBy=multi-user.target"}},
	} {
		enabled, _, contents := unit(c.name)
		if !enabled {
			t.Errorf("%s is not enabled", c.name)
		}
		lines := strings.Split(contents, "\n")
		for _, w := range c.want {
			if !slices.ContainsFunc(lines, func(l string) bool {
				return strings.HasPrefix(l, w) || (w == "reboot" && strings.HasSuffix(l, " reboot"))
			}) {
				t.Errorf("%s lacks a line %q:\n%s", c.name, w, contents)
			}
		}
	}
}

// TestWorkerButane: the zincati worker's Butane file is fcos 1.5.0, puts
// the FleetLock server's CA among the trust anchors (zincati trusts the
// host's store and presents no certificate) and writes the same zincati
// fragment as the example beside it, an https base_url in a group the
// agents serve.
func TestWorkerButane(t *testing.T) {
	dir := examplesDir + "/control-plane-and-zincati-workers/"
	data, err := os.ReadFile(dir + "worker.bu")
	if err != nil {
		t.Fatal(err)
	}
	var bu butane
	if err := yaml.UnmarshalStrict(data, &bu); err != nil {
		t.Fatalf("worker.bu: %v", err)
	}
	if bu.Variant != "fcos" || bu.Version != "1.5.0" {
		t.Errorf("variant %q version %q, want fcos 1.5.0", bu.Variant, bu.Version)
	}
	frag, err := os.ReadFile(dir + "zincati/55-updates-strategy.toml")
	if err != nil {
		t.Fatal(err)
	}
	var anchor, zincati bool
	for _, f := range bu.Storage.Files {
		switch {
		case strings.HasPrefix(f.Path, "/etc/pki/ca-trust/source/anchors/") && f.Contents.Local != "":
			anchor = true
		case f.Path == "/etc/zincati/config.d/55-updates-strategy.toml":
			zincati = true
			// The example file's first lines say where it goes; the rest is the same.
			if want := string(frag[strings.Index(string(frag), "[identity]"):]); f.Contents.Inline != want {
				t.Errorf("worker.bu's zincati fragment:\n%s\ndiffers from zincati/55-updates-strategy.toml:\n%s", f.Contents.Inline, want)
			}
			if !strings.Contains(f.Contents.Inline, `base_url = "https://`) || !strings.Contains(f.Contents.Inline, `strategy = "fleet_lock"`) {
				t.Errorf("zincati fragment: want fleet_lock over https:\n%s", f.Contents.Inline)
			}
		default:
			t.Errorf("storage.files: %s (local %q): neither the CA anchor nor zincati's fragment", f.Path, f.Contents.Local)
		}
	}
	if !anchor || !zincati {
		t.Errorf("worker.bu writes the CA anchor: %v, zincati's fragment: %v", anchor, zincati)
	}
}

package config

import (
	"path/filepath"
	"strings"
	"testing"
)

const (
	zUsr = "/usr/lib/zincati/config.d/"
	zRun = "/run/zincati/config.d/"
	zEtc = "/etc/zincati/config.d/"
	// fcosGraph is coreos/zincati dist/config.d/50-fedora-coreos-cincinnati.toml's.
	fcosGraph = "# Fedora CoreOS Cincinnati backend\n[cincinnati]\nbase_url= \"https://updates.example\"\n"
)

// TestZincatiDefaults: with updates.source unset, zincati's graph (its
// fragments merged by zincati's rules) becomes the source; a source set
// anywhere, no zincati base_url, or the bootc backend leave "origin".
func TestZincatiDefaults(t *testing.T) {
	for _, tt := range []struct {
		name          string
		files         map[string]string
		source, base  string
		file          string // the file recorded for updates.source ("" = default)
		derived       string // a substring of Sources.Derived ("-" = none, "" = not checked)
		baseKeyFileIn string // the file recorded for cincinnati.base_url
	}{
		{name: "no zincati", files: nil, source: "origin", derived: "-"},
		{name: "fedora coreos", files: map[string]string{zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph},
			source: "graph", base: "https://updates.example", file: zUsr + "50-fedora-coreos-cincinnati.toml",
			derived: `updates.source = "graph" (not set by any fragment) from zincati's configuration`, baseKeyFileIn: zUsr},
		{name: "etc overrides usr by name", files: map[string]string{
			zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph,
			zEtc + "50-fedora-coreos-cincinnati.toml": "[cincinnati]\nbase_url = \"https://mirror.example\"\n"},
			source: "graph", base: "https://mirror.example", file: zEtc + "50-fedora-coreos-cincinnati.toml", baseKeyFileIn: zEtc},
		{name: "etc beats run (zincati's order)", files: map[string]string{
			zRun + "50-x.toml": "[cincinnati]\nbase_url = \"https://run.example\"\n",
			zEtc + "50-x.toml": "[cincinnati]\nbase_url = \"https://etc.example\"\n"},
			source: "graph", base: "https://etc.example", file: zEtc + "50-x.toml", baseKeyFileIn: zEtc},
		{name: "later name wins", files: map[string]string{
			zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph,
			zEtc + "90-local.toml":                    "[cincinnati]\nbase_url = \"https://local.example\"\n"},
			source: "graph", base: "https://local.example", file: zEtc + "90-local.toml", baseKeyFileIn: zEtc},
		{name: "masked", files: map[string]string{
			zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph,
			zEtc + "50-fedora-coreos-cincinnati.toml": devNull}, source: "origin", derived: "-"},
		{name: "other zincati keys only", files: map[string]string{
			zUsr + "10-identity.toml": "[identity]\ngroup = \"default\"\n[updates]\nstrategy = \"immediate\"\n"}, source: "origin", derived: "-"},
		{name: "source set by a fragment", files: map[string]string{
			zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph,
			etcDir + "50-x.toml":                      "[updates]\nsource = \"origin\"\n"},
			source: "origin", file: etcDir + "50-x.toml", derived: "-"},
		{name: "source set in the package's directory", files: map[string]string{
			zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph,
			usrDir + "10-vendor.toml":                 "[updates]\nsource = \"origin\"\n"},
			source: "origin", file: usrDir + "10-vendor.toml", derived: "-"},
		{name: "bootc backend", files: map[string]string{
			zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph,
			etcDir + "50-x.toml":                      "[updates]\nbackend = \"bootc\"\n"},
			source: "origin", derived: "not followed: updates.backend = \"bootc\""},
		{name: "own base_url kept", files: map[string]string{
			zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph,
			etcDir + "50-x.toml":                      "[cincinnati]\nbase_url = \"https://own.example\"\n[identity]\nstream = \"next\"\n"},
			source: "graph", base: "https://own.example", file: zUsr + "50-fedora-coreos-cincinnati.toml",
			derived: `cincinnati.base_url "https://own.example" (set in ` + "ROOT" + etcDir + `50-x.toml) kept, identity.stream "next"`, baseKeyFileIn: etcDir},
	} {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{usrDir + "00-defaults.toml": ""}
			for p, c := range tt.files {
				files[p] = c
			}
			root := writeTree(t, files)
			cfg, src, err := Load(root)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Updates.Source != tt.source || cfg.Cincinnati.BaseURL != tt.base {
				t.Errorf("source %q base_url %q, want %q %q", cfg.Updates.Source, cfg.Cincinnati.BaseURL, tt.source, tt.base)
			}
			wantFile := DefaultSource
			if tt.file != "" {
				wantFile = filepath.Join(root, tt.file)
			}
			if got := src.File("updates.source"); got != wantFile {
				t.Errorf("updates.source from %s, want %s", got, wantFile)
			}
			if tt.baseKeyFileIn != "" && !strings.HasPrefix(src.File("cincinnati.base_url"), filepath.Join(root, tt.baseKeyFileIn)) {
				t.Errorf("cincinnati.base_url from %s, want under %s", src.File("cincinnati.base_url"), tt.baseKeyFileIn)
			}
			d := strings.Join(src.Derived, "\n")
			switch want := strings.ReplaceAll(tt.derived, "ROOT", root); {
			case want == "-":
				if d != "" {
					t.Errorf("derived %q, want none", d)
				}
			case !strings.Contains(d, want):
				t.Errorf("derived %q, want it to contain %q", d, want)
			}
		})
	}
}

// TestZincatiErrors: a broken zincati fragment, read because
// updates.source is not set, is an error naming the file and key; with
// updates.source set it is not read at all.
func TestZincatiErrors(t *testing.T) {
	for _, tt := range []struct{ name, frag, key, msg string }{
		{"not a string", "[cincinnati]\nbase_url = 5\n", "cincinnati.base_url", "must be a string"},
		{"bad TOML", "[cincinnati]\nbase_url = \"https://x.example\n", "cincinnati.base_url", "line 2"},
		{"not a URL", "[cincinnati]\nbase_url = \"updates.example\"\n", "cincinnati.base_url", `must be an http(s) URL, got "updates.example"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, map[string]string{usrDir + "00-defaults.toml": "", zEtc + "60-broken.toml": tt.frag})
			_, _, err := Load(root)
			want := filepath.Join(root, zEtc, "60-broken.toml") + ": " + tt.key + ": "
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error:\n%v\nwant %q ... %q", err, want, tt.msg)
			}
			root = writeTree(t, map[string]string{etcDir + "50-x.toml": "[updates]\nsource = \"origin\"\n", zEtc + "60-broken.toml": tt.frag})
			if _, _, err := Load(root); err != nil {
				t.Errorf("with updates.source set: %v", err)
			}
		})
	}
}

// TestReadZincatiFleetLock: how zincati asks before a reboot, merged as
// zincati merges (a later directory wins), each key with its fragment.
// Keys: coreos/zincati src/config/fragments.rs (UpdateFragment's
// strategy, UpdateFleetLock's base_url).
func TestReadZincatiFleetLock(t *testing.T) {
	root := writeTree(t, map[string]string{
		zUsr + "50-fedora-coreos-cincinnati.toml": fcosGraph,
		zUsr + "55-updates-strategy.toml":         "[updates]\nstrategy = \"immediate\"\n",
		zEtc + "55-updates-strategy.toml":         "[updates]\nstrategy = \"fleet_lock\"\n[updates.fleet_lock]\nbase_url = \"http://127.0.0.1:8444/\"\n",
	})
	g, err := ReadZincati(root)
	if err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(root, zEtc, "55-updates-strategy.toml")
	if g.Strategy != "fleet_lock" || g.StrategyFile != etc || g.FleetLockURL != "http://127.0.0.1:8444/" || g.FleetLockFile != etc ||
		g.BaseURL != "https://updates.example" {
		t.Errorf("got %+v", g)
	}
}

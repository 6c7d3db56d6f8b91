package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// Files shipped in the repository, relative to this package.
const (
	defaultsFile = "../../packaging/config.d/00-defaults.toml"
	examplesDir  = "../../packaging/examples"
)

// TestDefaultsFileIsDefault: 00-defaults.toml parses to exactly Default()
// and writes every key down, so the two cannot drift.
func TestDefaultsFileIsDefault(t *testing.T) {
	data, err := os.ReadFile(defaultsFile)
	if err != nil {
		t.Fatal(err)
	}
	root := writeTree(t, map[string]string{usrDir + "00-defaults.toml": string(data)})
	c, s, err := Load(root)
	if err != nil {
		t.Fatalf("loading the shipped defaults: %v", err)
	}
	if len(s.Warnings) > 0 {
		t.Errorf("warnings: %q", s.Warnings)
	}
	if got, want := stripped(c), stripped(Default()); !reflect.DeepEqual(got, want) {
		t.Errorf("00-defaults.toml differs from Default():\n got %+v\nwant %+v", got, want)
	}
	for key, file := range s.Keys {
		// updates.source's default depends on the host (zincati.go): a
		// value here would count as the operator's choice.
		if key == "updates.source" {
			if file != DefaultSource {
				t.Errorf("00-defaults.toml sets updates.source: it must stay unset (a comment)")
			}
			continue
		}
		if file == DefaultSource {
			t.Errorf("00-defaults.toml does not set %s", key)
		}
	}
}

// exampleSets lists packaging/examples/*/ directories holding fragments.
func exampleSets(t *testing.T) []string {
	entries, err := os.ReadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	var sets []string
	for _, e := range entries {
		if m, _ := filepath.Glob(filepath.Join(examplesDir, e.Name(), "*.toml")); e.IsDir() && len(m) > 0 {
			sets = append(sets, e.Name())
		}
	}
	return sets
}

// exampleChecks says what each example must achieve beyond being valid.
var exampleChecks = map[string]func(c *Config) string{
	"control-plane-3-node": func(c *Config) string {
		if c.Lock.Slots != 1 || len(c.Etcd.Endpoints) != 3 || !c.Leader.MoveLeader || !c.Leader.FollowersFirst || !c.Leader.RequireQuorum {
			return "want 1 slot, 3 endpoints, leader-aware ordering"
		}
		return ""
	},
	"workers-2-slots": func(c *Config) string {
		if c.Lock.Slots != 2 || c.Lock.Group == "default" || len(c.Reboot.Hooks) == 0 || c.Guard.MetricsURL != "" {
			return "want 2 slots in its own group, hooks, no etcd metrics"
		}
		return ""
	},
	"maintenance-windows": func(c *Config) string {
		ws, err := c.Reboot.ParseWindows()
		if err != nil || c.Reboot.Strategy != StrategyPeriodic || len(ws) == 0 {
			return "want periodic strategy with windows"
		}
		berlin, _ := time.LoadLocation("Europe/Berlin")
		// Tuesday 2026-03-10 23:30 and 01:30 the next morning are inside;
		// Tuesday noon is not.
		if !ws.Contains(time.Date(2026, 3, 10, 23, 30, 0, 0, berlin)) || !ws.Contains(time.Date(2026, 3, 11, 1, 30, 0, 0, berlin)) ||
			ws.Contains(time.Date(2026, 3, 10, 12, 0, 0, 0, berlin)) {
			return "windows do not cover weeknights across midnight"
		}
		return ""
	},
	"control-plane-and-zincati-workers": func(c *Config) string {
		if c.Lock.Group != "control-plane" || c.Lock.Slots != 1 || c.Etcd.CAFile == "" || c.Etcd.LocalUnit == "" ||
			c.FleetLock.Listen == "" || c.FleetLock.CertFile == "" || len(c.FleetLock.Groups) != 1 ||
			c.FleetLock.Groups[0].Name != "workers" || c.FleetLock.Groups[0].Slots < 1 || c.Reboot.Strategy != StrategyPeriodic {
			return "want the control plane's group with 1 slot, TLS etcd, a local member, FleetLock over TLS serving a workers group, windows"
		}
		return ""
	},
	"member-with-zincati": func(c *Config) string {
		if !c.FleetLock.ServeLocalMember || !strings.HasPrefix(c.FleetLock.Listen, "127.0.0.1:") || c.Etcd.LocalUnit == "" ||
			!c.Leader.MoveLeader || !c.Leader.RequireQuorum || c.Lock.Slots != 1 {
			return "want this host's zincati served as its member on loopback, a local member, leader-aware ordering"
		}
		return ""
	},
	"etcd-tls": func(c *Config) string {
		if c.Etcd.CAFile == "" || c.Etcd.CertFile == "" || c.Etcd.KeyFile == "" || c.Etcd.PasswordFile == "" {
			return "want CA, client cert/key and a password file"
		}
		return ""
	},
	"metrics": func(c *Config) string {
		if !strings.HasPrefix(c.Metrics.Listen, "127.0.0.1:") {
			return "want metrics on a loopback TCP address"
		}
		return ""
	},
}

// TestExamples loads every example set over the shipped defaults, in a temp
// root holding the files the example names (TLS, password).
func TestExamples(t *testing.T) {
	sets := exampleSets(t)
	for name := range exampleChecks {
		if !slices.Contains(sets, name) {
			t.Errorf("example %s is missing", name)
		}
	}
	defaults, err := os.ReadFile(defaultsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range sets {
		t.Run(set, func(t *testing.T) {
			files := map[string]string{usrDir + "00-defaults.toml": string(defaults)}
			pems := newTestPEM(t)
			var private []string
			frags, _ := filepath.Glob(filepath.Join(examplesDir, set, "*.toml"))
			for _, f := range frags {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				files[etcDir+filepath.Base(f)] = string(data)
				for key, p := range referencedFiles(t, data) {
					files[p] = pems.content(key)
					if strings.HasSuffix(key, "password_file") {
						private = append(private, p)
					}
				}
			}
			root := writeTree(t, files)
			for _, p := range private {
				chmod(t, root, p, 0o600)
			}
			c, s, err := Load(root)
			if err != nil {
				t.Fatalf("example %s: %v", set, err)
			}
			if len(s.Warnings) > 0 {
				t.Errorf("warnings: %q", s.Warnings)
			}
			check, ok := exampleChecks[set]
			if !ok {
				t.Fatalf("no check for example %s: add one to exampleChecks", set)
			}
			if msg := check(c); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// referencedFiles returns the etcd.*_file paths a fragment names, by key.
func referencedFiles(t *testing.T, data []byte) map[string]string {
	var raw struct {
		Etcd      map[string]any `toml:"etcd"`
		FleetLock map[string]any `toml:"fleetlock"`
	}
	if _, err := toml.Decode(string(data), &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for section, keys := range map[string]map[string]any{"etcd": raw.Etcd, "fleetlock": raw.FleetLock} {
		for k, v := range keys {
			if p, ok := v.(string); ok && strings.HasSuffix(k, "_file") && p != "" {
				out[section+"."+k] = p
			}
		}
	}
	return out
}

// TestExampleTLSFilesMustExist: the same example fails, naming file and
// key, when the certificate it references is absent.
func TestExampleTLSFilesMustExist(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(examplesDir, "etcd-tls", "50-etcd-tls.toml"))
	if err != nil {
		t.Fatal(err)
	}
	root := writeTree(t, map[string]string{etcDir + "50-etcd-tls.toml": string(data)})
	_, _, err = Load(root)
	for _, key := range []string{"etcd.ca_file", "etcd.cert_file", "etcd.key_file", "etcd.password_file"} {
		if err == nil || !strings.Contains(err.Error(), "50-etcd-tls.toml: "+key+": cannot read") {
			t.Errorf("want %s reported missing, got %v", key, err)
		}
	}
}

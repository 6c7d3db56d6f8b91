package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestGraphKeys: [cincinnati] and [identity] are checked, and the errors
// name the file and key.
func TestGraphKeys(t *testing.T) {
	for _, tt := range []struct{ frag, key, msg string }{
		{"[updates]\nsource = \"graph\"", "cincinnati.base_url", `required when updates.source is "graph"`},
		{"[cincinnati]\nbase_url = \"updates.example\"", "cincinnati.base_url", `must be an http(s) URL, got "updates.example"`},
		{"[cincinnati]\nbase_url = \"https://${other}.example\"", "cincinnati.base_url", `must be an http(s) URL`},
		{"[identity]\ngroup = \"a b\"", "identity.group", `must match`},
		{"[identity]\nnode_uuid = \"xyz\"", "identity.node_uuid", `must be 32 hex digits`},
		{"[identity]\nrollout_wariness = 1.5", "identity.rollout_wariness", `must be a number from 0.0 to 1.0 or "auto", got 1.5`},
		{"[identity]\nrollout_wariness = \"bold\"", "identity.rollout_wariness", `must be a number from 0.0 to 1.0 or "auto", got "bold"`},
		{"[identity]\nstream = \"st able\"", "identity.stream", `must match`},
		{"[identity]\nwariness = 0.5", "identity.wariness", `unknown key`},
	} {
		t.Run(tt.key+"/"+strings.ReplaceAll(tt.frag, "\n", " "), func(t *testing.T) {
			root := writeTree(t, map[string]string{etcDir + "50-x.toml": tt.frag + "\n", usrDir + "00-defaults.toml": ""})
			_, _, err := Load(root)
			want := filepath.Join(root, etcDir, "50-x.toml") + ": " + tt.key + ": " + tt.msg
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error:\n%v\nwant a line starting:\n%s", err, want)
			}
		})
	}
	root := writeTree(t, map[string]string{etcDir + "50-x.toml": `[updates]
source = "graph"
[cincinnati]
base_url = "https://${stream}.updates.example/${basearch}"
[identity]
group = "etcd"
rollout_wariness = 0.5
node_uuid = "975228d4-6dc9-4622-b9bb-e16671e2b58d"
`, usrDir + "00-defaults.toml": ""})
	cfg, _, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Identity.RolloutWariness != 0.5 || cfg.Identity.Group != "etcd" || cfg.Cincinnati.BaseURL != "https://${stream}.updates.example/${basearch}" {
		t.Errorf("loaded %+v %+v", cfg.Identity, cfg.Cincinnati)
	}
}

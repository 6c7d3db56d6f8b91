package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// guard.metrics_*_file are checked as etcd's TLS files are, and only go with
// an https:// guard.metrics_url.
func TestGuardMetricsTLSFiles(t *testing.T) {
	good, other := newTestPEM(t), newTestPEM(t)
	const https = "[guard]\nmetrics_url = \"https://127.0.0.1:2379/metrics\"\n"
	const files = "metrics_ca_file = \"/etc/pki/ca.crt\"\nmetrics_cert_file = \"/etc/pki/client.crt\"\nmetrics_key_file = \"/etc/pki/client.key\"\n"
	tests := []struct {
		name, frag, ca, key string
		wantKey, wantMsg    string
	}{
		{"valid", https + files, good.cert, good.key, "", ""},
		{"plain http", "[guard]\nmetrics_url = \"http://127.0.0.1:2381/metrics\"\n" + files, good.cert, good.key,
			"guard.metrics_ca_file", "set, but guard.metrics_url is not an https:// URL"},
		{"CA without a certificate", https + files, "text\n", good.key, "guard.metrics_ca_file", `no PEM certificate in "/etc/pki/ca.crt"`},
		{"key of another certificate", https + files, good.cert, other.key, "guard.metrics_key_file", "are not a matching PEM key pair"},
		{"cert without key", https + "metrics_cert_file = \"/etc/pki/client.crt\"\n", good.cert, good.key,
			"guard.metrics_key_file", "guard.metrics_cert_file and guard.metrics_key_file must be set together"},
		{"missing file", https + "metrics_ca_file = \"/etc/pki/none.crt\"\n", good.cert, good.key, "guard.metrics_ca_file", "/etc/pki/none.crt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, map[string]string{
				etcDir + "50-guard.toml": tt.frag,
				"/etc/pki/ca.crt":        tt.ca, "/etc/pki/client.crt": good.cert, "/etc/pki/client.key": tt.key,
			})
			c, _, err := Load(root)
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("valid files: %v", err)
				}
				if c.Guard.MetricsCAFile != "/etc/pki/ca.crt" || c.Guard.MetricsKeyFile != "/etc/pki/client.key" {
					t.Errorf("guard = %+v", c.Guard)
				}
				return
			}
			want := filepath.Join(root, etcDir, "50-guard.toml") + ": " + tt.wantKey + ": "
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error:\n%v\nwant a line starting %q with %q", err, want, tt.wantMsg)
			}
		})
	}
}

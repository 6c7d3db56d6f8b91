package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPEM is a self-signed certificate and its key, the CA file's content
// too: what the TLS file checks parse.
type testPEM struct{ cert, key string }

func newTestPEM(t *testing.T) testPEM {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testPEM{
		cert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		key:  string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
	}
}

// content is what a file named by key holds in a valid setup.
func (p testPEM) content(key string) string {
	switch {
	case strings.HasSuffix(key, "key_file"):
		return p.key
	case strings.HasSuffix(key, "password_file"):
		return "pw\n"
	}
	return p.cert
}

// chmod sets a file's mode under root past the umask.
func chmod(t *testing.T, root, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(filepath.Join(root, p), mode); err != nil {
		t.Fatal(err)
	}
}

// TestTLSFileContents: files that exist but would fail only when the etcd
// client is built are reported by Load, with file and key.
func TestTLSFileContents(t *testing.T) {
	good, other := newTestPEM(t), newTestPEM(t)
	const frag = "[etcd]\nendpoints = [\"https://10.0.0.1:2379\"]\nca_file = \"/etc/pki/ca.crt\"\n" +
		"cert_file = \"/etc/pki/client.crt\"\nkey_file = \"/etc/pki/client.key\"\n" +
		"username = \"ua\"\npassword_file = \"/etc/pki/password\"\n"
	tests := []struct {
		name             string
		ca, cert, key    string
		pwMode           os.FileMode
		wantKey, wantMsg string
	}{
		{"valid", good.cert, good.cert, good.key, 0o600, "", ""},
		{"password file 0400", good.cert, good.cert, good.key, 0o400, "", ""},
		{"CA file without a certificate", "just text\n", good.cert, good.key, 0o600, "etcd.ca_file", `no PEM certificate in "/etc/pki/ca.crt"`},
		{"CA file holding only a key", good.key, good.cert, good.key, 0o600, "etcd.ca_file", `no PEM certificate in "/etc/pki/ca.crt"`},
		{"key of another certificate", good.cert, good.cert, other.key, 0o600, "etcd.key_file", `"/etc/pki/client.key" and etcd.cert_file "/etc/pki/client.crt" are not a matching PEM key pair: tls: private key does not match public key`},
		{"password file readable by group", good.cert, good.cert, good.key, 0o640, "etcd.password_file", `"/etc/pki/password" is open to group or others (mode 0640)`},
		{"password file readable by others", good.cert, good.cert, good.key, 0o604, "etcd.password_file", `"/etc/pki/password" is open to group or others (mode 0604)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, map[string]string{
				etcDir + "50-tls.toml": frag,
				"/etc/pki/ca.crt":      tt.ca, "/etc/pki/client.crt": tt.cert, "/etc/pki/client.key": tt.key,
				"/etc/pki/password": "pw\n",
			})
			chmod(t, root, "/etc/pki/password", tt.pwMode)
			_, _, err := Load(root)
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("valid files: %v", err)
				}
				return
			}
			want := filepath.Join(root, etcDir, "50-tls.toml") + ": " + tt.wantKey + ": " + tt.wantMsg
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error:\n%v\nwant a line starting:\n%s", err, want)
			}
		})
	}
}

func TestPasswordNeverOverPlainHTTP(t *testing.T) {
	root := writeTree(t, map[string]string{
		etcDir + "50-a.toml": "[etcd]\nendpoints = [\"http://10.0.0.1:2379\"]\n",
		etcDir + "60-b.toml": "[etcd]\nusername = \"ua\"\npassword_file = \"/etc/pw\"\n",
		"/etc/pw":            "pw\n",
	})
	chmod(t, root, "/etc/pw", 0o600)
	_, _, err := Load(root)
	want := filepath.Join(root, etcDir, "60-b.toml") + ": etcd.password_file: a password is never sent over plain http: use https:// endpoints"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
}

func TestAutoNodeNameChecked(t *testing.T) {
	defer func(h func() (string, error)) { hostname = h }(hostname)
	for _, tt := range []struct {
		host, want string
	}{
		{"node-1.example", ""},
		{"bad/host", `agent.node_name: is "auto" and the host name "bad/host" does not match ^[a-zA-Z0-9.-]+$: set agent.node_name`},
		{"", `agent.node_name: is "auto" and the host name "" does not match`},
		{"with space", `the host name "with space" does not match`},
	} {
		hostname = func() (string, error) { return tt.host, nil }
		a := Default().Agent
		name, err := a.Node()
		_, _, lerr := Load(writeTree(t, map[string]string{etcDir + "50-a.toml": "[agent]\nnode_name = \"auto\"\n"}))
		if tt.want == "" {
			if err != nil || name != tt.host || lerr != nil {
				t.Errorf("host %q: Node() = %q, %v; Load: %v", tt.host, name, err, lerr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("host %q: Node() = %q, %v; want error %q", tt.host, name, err, tt.want)
		}
		if lerr == nil || !strings.Contains(lerr.Error(), "50-a.toml: "+tt.want) && !strings.Contains(lerr.Error(), "50-a.toml: agent.node_name: ") {
			t.Errorf("host %q: Load: %v; want agent.node_name named with its file", tt.host, lerr)
		}
	}
	a := Agent{NodeName: "cp1"}
	if name, err := a.Node(); name != "cp1" || err != nil {
		t.Errorf("explicit name: %q, %v", name, err)
	}
}

// TestFleetLockClientCAWarns: asking FleetLock clients for a certificate
// refuses every zincati (it sends none); the warning points to the
// allow-list, and a server without it warns of nothing.
func TestFleetLockClientCAWarns(t *testing.T) {
	p := newTestPEM(t)
	const base = "[etcd]\nendpoints = [\"https://10.0.0.1:2379\"]\n[fleetlock]\nlisten = \":8443\"\n" +
		"cert_file = \"/etc/fl/tls.crt\"\nkey_file = \"/etc/fl/tls.key\"\nallow_networks = [\"10.0.1.0/24\"]\n"
	for _, tt := range []struct{ frag, want string }{
		{base, ""},
		{base + "client_ca_file = \"/etc/fl/ca.crt\"\n", "fleetlock.client_ca_file: zincati sends no client certificate: every zincati is refused; " +
			"limit who may queue with fleetlock.allow_networks and allow_ids instead"},
	} {
		root := writeTree(t, map[string]string{
			etcDir + "50-fl.toml": tt.frag,
			"/etc/fl/tls.crt":     p.cert, "/etc/fl/tls.key": p.key, "/etc/fl/ca.crt": p.cert,
		})
		_, s, err := Load(root)
		if err != nil {
			t.Fatalf("%s: %v", tt.frag, err)
		}
		switch {
		case tt.want == "" && len(s.Warnings) > 0:
			t.Errorf("HTTPS with an allow-list: warnings %q", s.Warnings)
		case tt.want != "" && (len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "50-fl.toml: "+tt.want)):
			t.Errorf("client_ca_file: warnings %q, want %q", s.Warnings, tt.want)
		}
	}
}

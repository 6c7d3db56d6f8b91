package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFleetLockRules: each [fleetlock] rule names the fragment and key.
func TestFleetLockRules(t *testing.T) {
	for _, tt := range []struct{ frag, key, msg string }{
		{"[fleetlock]\nlisten = \"8443\"", "fleetlock.listen", `must be "host:port" or "" (off), got "8443"`},
		{"[fleetlock]\nlisten = \"unix:/run/fl.sock\"", "fleetlock.listen", `must be "host:port"`},
		{"[fleetlock]\nmax_hold = \"0s\"", "fleetlock.max_hold", `must be > 0, got "0s"`},
		{"[fleetlock]\ncert_file = \"/etc/none.pem\"\nkey_file = \"/etc/present.pem\"", "fleetlock.cert_file", `cannot read "/etc/none.pem"`},
		{"[fleetlock]\ncert_file = \"/etc/present.pem\"", "fleetlock.key_file", `fleetlock.cert_file and fleetlock.key_file must be set together`},
		{"[fleetlock]\nclient_ca_file = \"/etc/present.pem\"", "fleetlock.client_ca_file", `client certificates need TLS`},
		{"[fleetlock]\nlisten = \":8443\"\n[lock]\nenabled = false\n[etcd]\nendpoints = []", "etcd.endpoints", `at least one endpoint is needed while fleetlock.listen is set`},
		{"[fleetlock]\nport = 8443", "fleetlock.port", `unknown key`},
		{"[fleetlock]\nserve_local_member = true", "fleetlock.serve_local_member", `needs fleetlock.listen`},
		{"[fleetlock]\nserve_local_member = true\nlisten = \"10.0.0.5:8443\"", "fleetlock.serve_local_member", `fleetlock.listen "10.0.0.5:8443" is not reachable over loopback`},
		{"[fleetlock]\nserve_local_member = \"yes\"", "fleetlock.serve_local_member", ``},
		{"[fleetlock]\nmax_waiters = -1", "fleetlock.max_waiters", `must be >= 0 (0: no bound), got -1`},
		{"[fleetlock]\nallow_networks = [\"10.0.0.0/24\", \"10.0.0.300/24\"]", "fleetlock.allow_networks", `"10.0.0.300/24" is not a CIDR`},
		{"[fleetlock]\nallow_networks = [\"10.0.0.1\"]", "fleetlock.allow_networks", `"10.0.0.1" is not a CIDR`},
		{"[fleetlock]\nproxies = [\"10.0.0.0/24\"]", "fleetlock.proxies", `"10.0.0.0/24" is not an IP address`},
		{"[fleetlock]\nproxies = [\"proxy.example\"]", "fleetlock.proxies", `"proxy.example" is not an IP address`},
		{"[fleetlock]\nallow_ids = [\"a/b\"]", "fleetlock.allow_ids", `"a/b" is not a FleetLock client id`},
		{"[fleetlock]\nallow = [\"a\"]", "fleetlock.allow", `unknown key`},
		{"[fleetlock]\ncert_file = \"/etc/present.pem\"\nkey_file = \"/etc/present.pem\"", "fleetlock.key_file", `"/etc/present.pem" and fleetlock.cert_file "/etc/present.pem" are not a matching PEM key pair`},
		{"[fleetlock]\ncert_file = \"/etc/present.pem\"\nkey_file = \"/etc/present.pem\"\nclient_ca_file = \"/etc/present.pem\"", "fleetlock.client_ca_file", `no PEM certificate in "/etc/present.pem"`},
	} {
		t.Run(tt.key+"/"+strings.ReplaceAll(tt.frag, "\n", " "), func(t *testing.T) {
			root := writeTree(t, map[string]string{
				etcDir + "50-x.toml":        tt.frag + "\n",
				"/etc/present.pem":          "x",
				usrDir + "00-defaults.toml": "",
			})
			_, _, err := Load(root)
			want := filepath.Join(root, etcDir, "50-x.toml") + ": " + tt.key + ": " + tt.msg
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error:\n%v\nwant a line starting:\n%s", err, want)
			}
		})
	}
}

func TestFleetLockValid(t *testing.T) {
	pems := newTestPEM(t)
	root := writeTree(t, map[string]string{
		etcDir + "50-x.toml": "[fleetlock]\nlisten = \":8443\"\ncert_file = \"/etc/c.pem\"\nkey_file = \"/etc/k.pem\"\n" +
			"client_ca_file = \"/etc/ca.pem\"\nmax_hold = \"90m\"\nmax_waiters = 10\n" +
			"allow_ids = [\"w1\"]\nallow_networks = [\"10.0.0.0/24\", \"fd00::/64\"]\nproxies = [\"10.0.0.5\", \"fd00::5\"]\n" +
			"serve_local_member = true\n",
		"/etc/c.pem": pems.cert, "/etc/k.pem": pems.key, "/etc/ca.pem": pems.cert,
		usrDir + "00-defaults.toml": "",
	})
	c, _, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if c.FleetLock.Listen != ":8443" || c.FleetLock.MaxHold.D() != 90*time.Minute || c.FleetLock.ClientCAFile != "/etc/ca.pem" ||
		c.FleetLock.MaxWaiters != 10 || len(c.FleetLock.AllowIDs) != 1 || len(c.FleetLock.AllowNetworks) != 2 || !c.FleetLock.ServeLocalMember {
		t.Errorf("got %+v", c.FleetLock)
	}
	if n, err := c.FleetLock.Networks(); err != nil || len(n) != 2 || n[0].String() != "10.0.0.0/24" {
		t.Errorf("networks %v %v", n, err)
	}
	if p, err := c.FleetLock.ProxyAddrs(); err != nil || len(p) != 2 || p[1].String() != "fd00::5" {
		t.Errorf("proxies %v %v", p, err)
	}
	if d := Default().FleetLock; d.Listen != "" || d.MaxHold.D() != 2*time.Hour || d.MaxWaiters != 64 ||
		len(d.AllowIDs)+len(d.AllowNetworks)+len(d.Proxies) != 0 || d.ServeLocalMember {
		t.Errorf("defaults %+v: want off, max_hold 2h, max_waiters 64, no allow-list, no local member", d)
	}
}

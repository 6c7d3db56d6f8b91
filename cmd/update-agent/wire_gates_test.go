package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"

	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

const (
	firingEtcd     = `{"labels":{"alertname":"EtcdMembersDown"},"status":{"state":"active","silencedBy":[],"inhibitedBy":[]}}`
	firingWatchdog = `{"labels":{"alertname":"Watchdog"},"status":{"state":"active","silencedBy":[],"inhibitedBy":[]}}`
)

// tlsAlertmanager is an Alertmanager API v2 over TLS that accepts only
// client certificates of pki's CA; it serves *alerts (a JSON array).
func tlsAlertmanager(t *testing.T, pki *etcdtest.PKI, alerts *atomic.Value) *httptest.Server {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(pki.ServerCertFile, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v2/alerts" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, alerts.Load().(string))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// amTLSFiles are configRoot entries putting pki's CA and client
// certificate under root's /etc, and the [gates] fragment naming them.
func amTLSFiles(t *testing.T, pki *etcdtest.PKI, url, regexp string) map[string]string {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return map[string]string{
		"50-gates.toml": `
[gates]
alertmanager_url = "` + url + `"
alert_regexp = "` + regexp + `"
ca_file = "/etc/am-ca.pem"
cert_file = "/etc/am-client.pem"
key_file = "/etc/am-client-key.pem"
`,
		"../../am-ca.pem": read(pki.CAFile), "../../am-client.pem": read(pki.ClientCertFile), "../../am-client-key.pem": read(pki.ClientKey),
	}
}

// TestGateCheckerFromConfig (issue 18): the alert gate built from a parsed
// configuration reaches a TLS Alertmanager that demands a client
// certificate (gates.ca_file, cert_file, key_file, under --root) and
// applies gates.alert_regexp: a matching firing alert holds, naming it; a
// firing alert the regexp leaves out does not.
func TestGateCheckerFromConfig(t *testing.T) {
	pki := etcdtest.NewPKI(t)
	var alerts atomic.Value
	srv := tlsAlertmanager(t, pki, &alerts)
	root := configRoot(t, amTLSFiles(t, pki, srv.URL, "^Etcd"))
	cfg, _, err := loadConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	chk, err := gateChecker(cfg, root, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, alerts string
		hold         bool
		why          string
	}{
		{"matching alert firing", "[" + firingEtcd + "," + firingWatchdog + "]", true, "alerts: firing: EtcdMembersDown"},
		{"only an alert the regexp leaves out", "[" + firingWatchdog + "]", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alerts.Store(tc.alerts)
			hold, why := gates.Holding(chk.Check(context.Background()))
			if hold != tc.hold || why != tc.why {
				t.Fatalf("hold %v %q, want %v %q", hold, why, tc.hold, tc.why)
			}
		})
	}
}

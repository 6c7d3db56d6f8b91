package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// guard.metrics_*_file reach doctor's metrics check and the guard's
// scrapes: an endpoint that requires a client certificate answers doctor.
func TestGuardMetricsTLSWired(t *testing.T) {
	pki := etcdtest.NewPKI(t)
	cert, err := tls.LoadX509KeyPair(pki.ServerCertFile, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# etcd metrics\n")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	cfg := config.Default()
	cfg.Guard.MetricsURL = srv.URL + "/metrics"
	fetch := func() error {
		t.Helper()
		m, err := doctorMetrics(cfg, "")
		if err != nil {
			t.Fatal(err)
		}
		body, err := m.Fetch(context.Background(), cfg.Guard.MetricsURL)
		if err == nil {
			body.Close()
		}
		return err
	}
	if err := fetch(); err == nil {
		t.Fatal("doctor fetched without the TLS files")
	}
	cfg.Guard.MetricsCAFile, cfg.Guard.MetricsCertFile, cfg.Guard.MetricsKeyFile = pki.CAFile, pki.ClientCertFile, pki.ClientKey
	if err := fetch(); err != nil {
		t.Fatalf("doctor with guard.metrics_*_file: %v", err)
	}
	o := stageOptions(cfg, "", t.TempDir(), &rpmostree.Client{}, nil)
	if c := o.Guard.MetricsTLS; c == nil || len(c.Certificates) != 1 || c.RootCAs == nil {
		t.Errorf("staging's guard TLS = %+v, want the CA and the client certificate", c)
	}
}

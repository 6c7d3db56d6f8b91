package guard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/update-agent/update-agent/tests/etcdtest"
)

// mTLSMetrics serves etcd-like /metrics over TLS, as kubeadm's etcd does on
// its client port: only to a client certificate of the cluster's CA.
func mTLSMetrics(t *testing.T, pki *etcdtest.PKI) *httptest.Server {
	t.Helper()
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
		fmt.Fprint(w, etcdMetrics([]uint64{100}, []uint64{10}))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestMetricsOverClientCertTLS(t *testing.T) {
	pki := etcdtest.NewPKI(t)
	srv := mTLSMetrics(t, pki)
	read := func(ca, cert, key string) error {
		t.Helper()
		c, err := MetricsTLS(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		in := &Inputs{MetricsURL: srv.URL + "/metrics", TLS: c}
		defer in.Close()
		r, err := in.Read(context.Background())
		if err == nil && r.Hists[MetricWALFsync].Total() != 100 {
			t.Errorf("wal fsyncs = %d, want 100", r.Hists[MetricWALFsync].Total())
		}
		return err
	}
	if err := read(pki.CAFile, pki.ClientCertFile, pki.ClientKey); err != nil {
		t.Errorf("with the CA and a client certificate: %v", err)
	}
	if err := read(pki.CAFile, "", ""); err == nil {
		t.Error("read without a client certificate")
	}
	if err := read(pki.CAFile, pki.OtherClientCert, pki.OtherKey); err == nil {
		t.Error("read with a client certificate of another CA")
	}
	if err := read("", pki.ClientCertFile, pki.ClientKey); err == nil {
		t.Error("trusted the member's certificate without its CA")
	}
}

func TestMetricsTLSFiles(t *testing.T) {
	if c, err := MetricsTLS("", "", ""); c != nil || err != nil {
		t.Errorf("no files: %v, %v; want nil, nil", c, err)
	}
	pki := etcdtest.NewPKI(t)
	if _, err := MetricsTLS(pki.ClientKey, "", ""); err == nil {
		t.Error("a key accepted as the CA")
	}
	if _, err := MetricsTLS("", pki.ClientCertFile, pki.OtherKey); err == nil {
		t.Error("a mismatched key pair accepted")
	}
}

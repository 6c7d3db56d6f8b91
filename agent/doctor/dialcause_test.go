package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/update-agent/update-agent/tests/etcdtest"
)

func TestDialCause(t *testing.T) {
	for _, tt := range []struct {
		err       error
		handshake bool
		want      string
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false, "connection refused"},
		{&net.DNSError{Err: "no such host", Name: "etcd-9", IsNotFound: true}, false, "host name not found"},
		{context.DeadlineExceeded, false, "timed out after 3s connecting"},
		{context.DeadlineExceeded, true, "TLS handshake timed out after 3s"},
		{errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority"), true, "TLS handshake failed: tls: failed to verify certificate"},
	} {
		if got := dialCause(tt.err, tt.handshake, 3*time.Second); !strings.Contains(got, tt.want) {
			t.Errorf("dialCause(%v, %v) = %q, want %q", tt.err, tt.handshake, got, tt.want)
		}
	}
}

// TestProbeNamesTheCause: the etcd line names each endpoint that does not
// answer and why (the client alone says "context deadline exceeded").
func TestProbeNamesTheCause(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String()
	closed.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accepts, never speaks
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	pki := etcdtest.NewPKI(t)
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: pki.Server()})
	wrongCA := clientTLS(t, pki.OtherCAFile, pki.ClientCertFile, pki.ClientKey)

	for _, tt := range []struct {
		name, endpoint string
		tls            *tls.Config
		want           string
	}{
		{"refused", refused, nil, refused + ": connection refused"},
		{"handshake timeout", "https://" + silent.Addr().String(), &tls.Config{}, "https://" + silent.Addr().String() + ": TLS handshake timed out"},
		{"wrong CA", c.Endpoints()[0], wrongCA, c.Endpoints()[0] + ": TLS handshake failed: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{tt.endpoint}, DialTimeout: time.Second, TLS: tt.tls, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			_, err = EtcdClient{Cli: cli, KeyPrefix: "/ua", CallTimeout: 500 * time.Millisecond, TLS: tt.tls}.Probe(t.Context())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("probe: %v\nwant %q", err, tt.want)
			}
		})
	}
}

func clientTLS(t *testing.T, caFile, certFile, keyFile string) *tls.Config {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal(fmt.Errorf("no certificate in %s", caFile))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}
}

func TestWriteJSON(t *testing.T) {
	var b strings.Builder
	r := Report{{Check: "etcd", OK: true, Detail: "reachable"}, {Check: "leader", Detail: "none"}, {Check: "etcd alarms", Wait: true, Detail: "NOSPACE"}}
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got []map[string]string
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"check": "etcd", "result": "ok", "detail": "reachable"},
		{"check": "leader", "result": "FAIL", "detail": "none"},
		{"check": "etcd alarms", "result": "WAIT", "detail": "NOSPACE"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("WriteJSON:\n%s\nwant %v", b.String(), want)
	}
}

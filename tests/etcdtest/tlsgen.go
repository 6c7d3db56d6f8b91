package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA with a server and a client certificate, written as PEM files.
type PKI struct {
	CAFile                    string
	ServerCertFile, ServerKey string
	ClientCertFile, ClientKey string
	OtherCAFile               string // a CA that signed nothing the server trusts
	OtherClientCert, OtherKey string // a client certificate from OtherCAFile
	dir                       string
	caCert                    *x509.Certificate
	caKey, otherKey           *ecdsa.PrivateKey
	otherCert                 *x509.Certificate
	serial                    int64
}

// Server returns the files for Options.TLS.
func (p *PKI) Server() *TLSFiles {
	return &TLSFiles{CAFile: p.CAFile, CertFile: p.ServerCertFile, KeyFile: p.ServerKey}
}

// NewPKI generates the certificates in a temporary directory.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{dir: t.TempDir()}
	var err error
	p.caCert, p.caKey, p.CAFile, err = p.newCA("etcdtest CA", "ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	p.otherCert, p.otherKey, p.OtherCAFile, err = p.newCA("unrelated CA", "other-ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	serverTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if p.ServerCertFile, p.ServerKey, err = p.issue(serverTmpl, p.caCert, p.caKey, "server"); err != nil {
		t.Fatal(err)
	}
	clientTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "update-agent"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if p.ClientCertFile, p.ClientKey, err = p.issue(clientTmpl, p.caCert, p.caKey, "client"); err != nil {
		t.Fatal(err)
	}
	otherTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "intruder"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if p.OtherClientCert, p.OtherKey, err = p.issue(otherTmpl, p.otherCert, p.otherKey, "other-client"); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *PKI) newCA(cn, file string) (*x509.Certificate, *ecdsa.PrivateKey, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, "", err
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(p.serial),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, "", err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, "", err
	}
	path := filepath.Join(p.dir, file)
	return cert, key, path, writePEM(path, "CERTIFICATE", der)
}

func (p *PKI) issue(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	p.serial++
	tmpl.SerialNumber = big.NewInt(p.serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile = filepath.Join(p.dir, name+".pem")
	keyFile = filepath.Join(p.dir, name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "EC PRIVATE KEY", kder)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

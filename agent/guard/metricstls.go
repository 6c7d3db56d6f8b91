package guard

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// MetricsTLS is the TLS client configuration for an https:// metrics
// endpoint: caFile ("" = system roots) verifies the member's server
// certificate, certFile and keyFile ("" = none) are the client certificate
// a member serving /metrics with client-cert auth requires. nil when all
// are "".
func MetricsTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading the metrics CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading the metrics CA: no PEM certificate in %s", caFile)
		}
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the metrics client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

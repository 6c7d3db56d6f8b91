package doctor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"
)

// The etcd client reports an endpoint that does not answer as "context
// deadline exceeded" whatever the reason: its connection is retried behind
// the call. doctor dials the endpoint itself to name the cause.

// endpointCause dials endpoint (and, for https, shakes hands with tlsConf)
// and says why it fails; "" when it connects, and the client's error is
// all there is to say.
func endpointCause(ctx context.Context, endpoint string, tlsConf *tls.Config, timeout time.Duration) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return ""
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "2379")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
	if err != nil {
		return dialCause(err, false, timeout)
	}
	defer conn.Close()
	if u.Scheme != "https" && u.Scheme != "unixs" {
		return ""
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if tlsConf != nil {
		cfg = tlsConf.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	if err := tls.Client(conn, cfg).HandshakeContext(ctx); err != nil {
		return dialCause(err, true, timeout)
	}
	return ""
}

// dialCause names the cause of a failed TCP dial or TLS handshake (tls)
// in an operator's words.
func dialCause(err error, handshake bool, timeout time.Duration) string {
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: nothing listens on that port"
	case errors.As(err, &dns):
		return "host name not found: " + dns.Error()
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host: " + err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		if handshake {
			return fmt.Sprintf("TLS handshake timed out after %s (is the endpoint http://, not https://?)", timeout)
		}
		return fmt.Sprintf("timed out after %s connecting (no answer: a firewall dropping packets, or the wrong address)", timeout)
	case handshake:
		return "TLS handshake failed: " + err.Error()
	}
	return err.Error()
}

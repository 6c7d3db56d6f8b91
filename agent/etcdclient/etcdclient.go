// Package etcdclient builds an etcd v3 client from the agent's connection
// options (endpoints, TLS files, user and password file), so the lock, the
// member checks and the operator subcommands all connect the same way.
package etcdclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Options say how to reach etcd.
type Options struct {
	Endpoints []string
	// CAFile verifies the servers; CertFile/KeyFile are the client
	// certificate (both or neither). TLS is used when any is set.
	CAFile, CertFile, KeyFile string
	// Username with the password read from PasswordFile (trailing newline
	// stripped), so the password never sits in the config or argv.
	Username     string
	PasswordFile string
	DialTimeout  time.Duration
}

// DefaultDialTimeout applies when Options.DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// WithEndpoints returns a copy of o that talks to endpoints only (for calls
// that must reach one particular member, such as MoveLeader).
func (o Options) WithEndpoints(endpoints ...string) Options {
	o.Endpoints = append([]string(nil), endpoints...)
	return o
}

// Config turns o into a clientv3.Config.
func (o Options) Config() (clientv3.Config, error) {
	if len(o.Endpoints) == 0 {
		return clientv3.Config{}, errors.New("no etcd endpoints configured")
	}
	cfg := clientv3.Config{
		Endpoints:   o.Endpoints,
		DialTimeout: o.DialTimeout,
		// The client's own zap logging would bypass the journal fields of
		// our slog; errors reach us as return values anyway.
		Logger: zap.NewNop(),
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return clientv3.Config{}, err
	}
	cfg.TLS = tlsCfg
	if o.Username != "" {
		if o.PasswordFile == "" {
			return clientv3.Config{}, fmt.Errorf("etcd username %q given without a password file", o.Username)
		}
		pw, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return clientv3.Config{}, fmt.Errorf("reading etcd password file: %w", err)
		}
		cfg.Username = o.Username
		cfg.Password = strings.TrimRight(string(pw), "\r\n")
	}
	return cfg, nil
}

func (o Options) tlsConfig() (*tls.Config, error) {
	if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
		for _, ep := range o.Endpoints {
			if strings.HasPrefix(ep, "https://") {
				// System roots then: an https endpoint without a CA file.
				return &tls.Config{MinVersion: tls.VersionTLS12}, nil
			}
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading etcd CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA file %s: no PEM certificate in it", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, fmt.Errorf("etcd client certificate and key must be given together (cert %q, key %q)", o.CertFile, o.KeyFile)
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading etcd client certificate %s / %s: %w", o.CertFile, o.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// New connects to etcd. clientv3 dials lazily: an unreachable cluster shows
// up as an error on the first request, not here.
func New(o Options) (*clientv3.Client, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd at %s: %w", strings.Join(o.Endpoints, ","), err)
	}
	return cli, nil
}

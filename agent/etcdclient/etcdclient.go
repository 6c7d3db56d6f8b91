// Package etcdclient builds an etcd v3 client from the agent's connection
// options (endpoints, TLS files, user and password file), so the lock, the
// member checks and the operator subcommands all connect the same way.
package etcdclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
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

// ConfigError is a problem with the options themselves (a file, a
// combination), not with reaching etcd: retrying will not help, so callers
// report it as a configuration error.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErr(format string, args ...any) error {
	return &ConfigError{fmt.Errorf(format, args...)}
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
		return clientv3.Config{}, &ConfigError{errors.New("no etcd endpoints configured")}
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
		pw, err := o.password(tlsCfg != nil)
		if err != nil {
			return clientv3.Config{}, err
		}
		cfg.Username = o.Username
		cfg.Password = pw
	}
	return cfg, nil
}

// password reads the password file, refusing what would give the password
// away: plain http, or a file that group or others may open.
func (o Options) password(withTLS bool) (string, error) {
	if o.PasswordFile == "" {
		return "", configErr("etcd username %q given without a password file", o.Username)
	}
	for _, ep := range o.Endpoints {
		if !withTLS || strings.HasPrefix(ep, "http://") {
			return "", configErr("etcd password file %s: a password is never sent over plain http (endpoint %s)", o.PasswordFile, ep)
		}
	}
	f, err := os.Open(o.PasswordFile)
	if err != nil {
		return "", configErr("reading etcd password file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", configErr("reading etcd password file: %w", err)
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return "", configErr("etcd password file %s is open to group or others (mode %04o): make it 0600 or 0400", o.PasswordFile, m)
	}
	// A password is a line; the cap keeps a wrong path (a log, a device)
	// from being read whole.
	pw, err := io.ReadAll(io.LimitReader(f, maxPasswordSize+1))
	if err != nil {
		return "", configErr("reading etcd password file: %w", err)
	}
	if len(pw) > maxPasswordSize {
		return "", configErr("etcd password file %s: longer than %d bytes, not a password", o.PasswordFile, maxPasswordSize)
	}
	return strings.TrimRight(string(pw), "\r\n"), nil
}

// maxPasswordSize bounds the password file's read.
const maxPasswordSize = 4096

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
			return nil, configErr("reading etcd CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configErr("etcd CA file %s: no PEM certificate in it", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, configErr("etcd client certificate and key must be given together (cert %q, key %q)", o.CertFile, o.KeyFile)
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, configErr("loading etcd client certificate %s / %s: %w", o.CertFile, o.KeyFile, err)
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

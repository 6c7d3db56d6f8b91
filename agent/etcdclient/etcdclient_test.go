package etcdclient_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestTLS: a cluster that requires client certificates from its CA accepts
// ours, refuses a certificate from another CA and a missing one, and the
// member checks (which dial each member separately) work over TLS too.
func TestTLS(t *testing.T) {
	pki := etcdtest.NewPKI(t)
	c := etcdtest.Start(t, etcdtest.Options{TLS: pki.Server()})
	good := etcdclient.Options{Endpoints: c.Endpoints(), CAFile: pki.CAFile,
		CertFile: pki.ClientCertFile, KeyFile: pki.ClientKey, DialTimeout: 2 * time.Second}

	cli, err := etcdclient.New(good)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put over TLS with a client certificate: %v", err)
	}
	lead := c.LeaderIndex()
	cl := etcdmember.New(cli, etcdmember.Options{LocalName: c.Members[lead].Name})
	h, err := cl.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range h.Members {
		if !m.Reachable {
			t.Errorf("member %s unreachable over TLS: %s", m.Name, m.Err)
		}
	}
	if _, err := cl.MoveLeaderAway(ctx, nil); err != nil {
		t.Errorf("MoveLeader over TLS: %v", err)
	}

	bad := map[string]etcdclient.Options{
		"no client certificate": {Endpoints: c.Endpoints(), CAFile: pki.CAFile},
		"certificate from another CA": {Endpoints: c.Endpoints(), CAFile: pki.CAFile,
			CertFile: pki.OtherClientCert, KeyFile: pki.OtherKey},
		"server not trusted": {Endpoints: c.Endpoints(), CAFile: pki.OtherCAFile,
			CertFile: pki.ClientCertFile, KeyFile: pki.ClientKey},
	}
	for name, o := range bad {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o.DialTimeout = time.Second
			cli, err := etcdclient.New(o)
			if err != nil {
				return // refused while dialing: fine
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := cli.Get(ctx, "k"); err == nil {
				t.Error("request succeeded")
			}
		})
	}
}

// TestAuth: user and password over TLS (a password never goes over plain
// http), the password from a file only its owner may read.
func TestAuth(t *testing.T) {
	pki := etcdtest.NewPKI(t)
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: pki.Server(), AuthRootPassword: "s3cret"})
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(wrong, []byte("nope\n"), 0o600)
	base := etcdclient.Options{Endpoints: c.Endpoints(), CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKey}
	with := func(user, file string) etcdclient.Options {
		o := base
		o.Username, o.PasswordFile = user, file
		return o
	}

	cli, err := etcdclient.New(with("root", pw))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Errorf("put with user and password file: %v", err)
	}
	if cli, err := etcdclient.New(with("root", wrong)); err == nil {
		_, err = cli.Put(ctx, "k", "v")
		cli.Close()
		if err == nil {
			t.Error("wrong password accepted")
		}
	}
	anon, err := etcdclient.New(base)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Put(ctx, "k", "v"); err == nil {
		t.Error("anonymous put accepted with auth enabled")
	}
}

func TestOptionErrors(t *testing.T) {
	dir := t.TempDir()
	pki := etcdtest.NewPKI(t)
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	private := file("private", "pw\n", 0o600)
	open := file("open", "pw\n", 0o640)
	huge := file("huge", strings.Repeat("x", 5000), 0o600)
	notPEM := file("ca.pem", "not a certificate\n", 0o644)
	tests := []struct {
		o    etcdclient.Options
		want string
	}{
		{etcdclient.Options{}, "no etcd endpoints"},
		{etcdclient.Options{Endpoints: []string{"x"}, CertFile: "c"}, "together"},
		{etcdclient.Options{Endpoints: []string{"x"}, CAFile: filepath.Join(dir, "missing.pem")}, "reading etcd CA file"},
		{etcdclient.Options{Endpoints: []string{"x"}, Username: "u"}, "without a password file"},
		{etcdclient.Options{Endpoints: []string{"https://x:2379"}, Username: "u", PasswordFile: filepath.Join(dir, "nope")}, "reading etcd password file"},
		{etcdclient.Options{Endpoints: []string{"https://x:2379"}, Username: "u", PasswordFile: open}, "is open to group or others (mode 0640)"},
		{etcdclient.Options{Endpoints: []string{"https://x:2379"}, Username: "u", PasswordFile: huge}, "longer than 4096 bytes"},
		{etcdclient.Options{Endpoints: []string{"http://x:2379"}, Username: "u", PasswordFile: private}, "never sent over plain http (endpoint http://x:2379)"},
		{etcdclient.Options{Endpoints: []string{"x:2379"}, Username: "u", PasswordFile: private}, "never sent over plain http"},
		{etcdclient.Options{Endpoints: []string{"https://x:2379"}, CAFile: notPEM}, "no PEM certificate"},
		{etcdclient.Options{Endpoints: []string{"https://x:2379"}, CertFile: pki.ClientCertFile, KeyFile: pki.OtherKey}, "loading etcd client certificate"},
	}
	for _, tt := range tests {
		_, err := tt.o.Config()
		var ce *etcdclient.ConfigError
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &ce) {
			t.Errorf("Config(%+v) = %v; want a ConfigError containing %q", tt.o, err, tt.want)
		}
	}
	ok := etcdclient.Options{Endpoints: []string{"https://x:2379"}, Username: "u", PasswordFile: private}
	if cfg, err := ok.Config(); err != nil || cfg.Password != "pw" {
		t.Errorf("Config(%+v) = password %q, %v; want \"pw\"", ok, cfg.Password, err)
	}
}

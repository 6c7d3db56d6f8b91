// Package guestbin builds the programs the guest e2e tests install in a
// guest besides the agent: a current etcd server (Debian's etcd-server is the
// old 3.4).
package guestbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// EtcdVersion is the etcd server the guest runs: the one go.mod pins for the
// client.
const EtcdVersion = "v3.7.3"

// Etcd writes the etcd server binary to dst (BuildEtcd), failing t.
func Etcd(t testing.TB, ctx context.Context, dst string) {
	t.Helper()
	if err := BuildEtcd(ctx, dst); err != nil {
		t.Fatal(err)
	}
}

// BuildEtcd writes the etcd server binary to dst. It is built (the module's
// main package) in a module of its own: built inside ours, its command-line
// dependencies would have to be in our go.sum. The binary is cached next to
// the guest image; the tests, the bench and the demo share it.
func BuildEtcd(ctx context.Context, dst string) error {
	cache, err := os.UserCacheDir()
	if err != nil {
		return err
	}
	cached := filepath.Join(cache, "update-agent-guest", "etcd-"+EtcdVersion)
	if _, err := os.Stat(cached); err != nil {
		dir, err := os.MkdirTemp("", "etcd-build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		for _, argv := range [][]string{
			{"go", "mod", "init", "etcdbuild"},
			{"go", "get", "go.etcd.io/etcd/server/v3@" + EtcdVersion},
			{"go", "build", "-trimpath", "-o", cached + ".tmp", "go.etcd.io/etcd/server/v3"},
		} {
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("building etcd %s: %s: %w\n%s", EtcdVersion, strings.Join(argv, " "), err, out)
			}
		}
		if err := os.Rename(cached+".tmp", cached); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(cached)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// EtcdUnit runs the guest's single-member etcd (binary in /usr/local/bin,
// data on the data disk, metrics on 127.0.0.1:2381).
const EtcdUnit = `[Unit]
Description=etcd (update-agent e2e)
RequiresMountsFor=/var/lib/data
[Service]
Type=notify
ExecStart=/usr/local/bin/etcd --name m0 --data-dir /var/lib/data/etcd \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster m0=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
Restart=on-failure
[Install]
WantedBy=multi-user.target
`

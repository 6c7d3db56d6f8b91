// Package guestbin builds the programs the guest e2e tests install in a
// guest besides the agent: a current etcd server (Debian's etcd-server is the
// old 3.4).
package guestbin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// EtcdVersion is the etcd server the guest runs: the one go.mod pins for the
// client.
const EtcdVersion = "v3.7.3"

// Etcd writes the etcd server binary to dst. It is built (the module's main
// package) in a module of its own: built inside ours, its command-line
// dependencies would have to be in our go.sum. The binary is cached next to
// the guest image.
func Etcd(t testing.TB, ctx context.Context, dst string) {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	cached := filepath.Join(cache, "update-agent-guest", "etcd-"+EtcdVersion)
	if _, err := os.Stat(cached); err != nil {
		dir := t.TempDir()
		for _, argv := range [][]string{
			{"go", "mod", "init", "etcdbuild"},
			{"go", "get", "go.etcd.io/etcd/server/v3@" + EtcdVersion},
			{"go", "build", "-trimpath", "-o", cached + ".tmp", "go.etcd.io/etcd/server/v3"},
		} {
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("building etcd: %s: %v\n%s", strings.Join(argv, " "), err, out)
			}
		}
		if err := os.Rename(cached+".tmp", cached); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(cached)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
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

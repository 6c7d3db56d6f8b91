package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestDaemonLockSpacesItsRelease: the daemon's lock takes lock.min_interval
// from the configuration: after a reboot holding the slot, its release
// leaves the group's spacing marker.
func TestDaemonLockSpacesItsRelease(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := config.Default()
	cfg.Agent.NodeName = "n1"
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	cfg.Lock.MinInterval = config.Duration(time.Minute)
	root := t.TempDir()
	boot := func(id string) {
		p := filepath.Join(root, state.BootIDPath)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(id+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, lock.MachineIDPath), []byte("0123456789abcdef0123456789abcdef\n"), 0o444)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	boot("11111111-1111-1111-1111-111111111111")
	a, err := wire(cfg, root, quiet, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.lock.Acquire(ctx, "0123456789abcdef0123"); err != nil {
		t.Fatal(err)
	}
	a.close() // stops for the reboot; the slot stays

	boot("22222222-2222-2222-2222-222222222222")
	a, err = wire(cfg, root, quiet, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if err := a.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	sp, err := lock.ReadSpacing(ctx, c.Client(t, nil), cfg.Lock.KeyPrefix, cfg.Lock.Group)
	if err != nil || !sp.Active || sp.By != "n1" {
		t.Fatalf("spacing after the daemon's release: %+v %v", sp, err)
	}
}

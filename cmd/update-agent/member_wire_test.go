package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestDaemonLockSeesAPromotedWorker: the daemon's lock looks the local
// member up live. A worker holding its group's slot whose host becomes an
// etcd member while the agent runs (a learner joins from its address) can
// no longer fence, and acquiring again takes the member slot. A lookup
// that kept its first answer ("a worker") would let the new member reboot
// beside another member that is down.
func TestDaemonLockSeesAPromotedWorker(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	const promoted = "127.0.0.2" // this host's only address, as the lookup sees it
	memberHost = func(o *etcdmember.Options) {
		o.Addrs = func() ([]etcdmember.HostAddr, error) {
			return []etcdmember.HostAddr{{IP: netip.MustParseAddr(promoted), Iface: "lo"}}, nil
		}
		o.Hostname = func() (string, error) { return "promoted-worker", nil }
		o.LocalEndpoints = []string{} // m0 answers on loopback, but on another host's
	}
	t.Cleanup(func() { memberHost = nil })

	cfg := config.Default()
	cfg.Agent.NodeName = "n1"
	cfg.Etcd.Endpoints = []string{c.Members[0].ClientURL}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, lock.MachineIDPath), []byte("0123456789abcdef0123456789abcdef\n"), 0o444)
	os.MkdirAll(filepath.Join(root, "proc/sys/kernel/random"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"), []byte("11111111-1111-1111-1111-111111111111\n"), 0o444)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := wire(cfg, root, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	cli := c.Client(t, nil)
	memberHolders := func() []string {
		t.Helper()
		gs, err := lock.Status(ctx, cli, cfg.Lock.KeyPrefix, cfg.Lock.Slots, lock.MembersGroup, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var hs []string
		for _, g := range gs {
			if g.Group == lock.MembersGroup {
				for _, h := range g.Holders {
					hs = append(hs, h.Node)
				}
			}
		}
		return hs
	}

	if _, err := a.lock.Acquire(ctx, "0123456789abcdef0123"); err != nil {
		t.Fatal(err)
	}
	if err := a.lock.Fence(ctx); err != nil {
		t.Fatalf("a worker holding its slot cannot fence: %v", err)
	}
	if hs := memberHolders(); len(hs) != 0 {
		t.Fatalf("a worker took the member slot: %v", hs)
	}

	c.AddLearner(t, promoted)
	err = a.lock.Fence(ctx)
	if err == nil {
		t.Fatal("the promoted worker fenced without the member slot: the member lookup kept its first answer")
	}
	if !errors.Is(err, lock.ErrNotHolder) {
		t.Errorf("Fence after the promotion = %v, want ErrNotHolder", err)
	}
	if _, err := a.lock.Acquire(ctx, "0123456789abcdef0123"); err != nil {
		t.Fatal(err)
	}
	if hs := memberHolders(); len(hs) != 1 || hs[0] != "n1" {
		t.Errorf("member slot holders after acquiring again: %v, want n1", hs)
	}
	if err := a.lock.Fence(ctx); err != nil {
		t.Errorf("the promoted worker holding both slots cannot fence: %v", err)
	}
}

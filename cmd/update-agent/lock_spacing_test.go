package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestLockStatusShowsSpacing: a node that rebooted holding its slot
// releases it; lock status then says the group's next reboot waits for
// lock.min_interval, with or without --group.
func TestLockStatusShowsSpacing(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	root := configRoot(t, map[string]string{"50-etcd.toml": fmt.Sprintf(`
[etcd]
endpoints = [%q]
[lock]
group = "masters"
slots = 1
min_interval = "10m"
`, c.Members[0].ClientURL)})
	cli := c.Client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	mk := func(boot string) *lock.Lock {
		l, err := lock.New(cli, lock.Options{Prefix: "/update-agent/lock", Group: "masters", Slots: 1, TTL: time.Minute,
			Node: "node-a", BootID: boot, StateDir: dir, MinInterval: 10 * time.Minute,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	before := mk("boot-1")
	if _, err := before.Acquire(ctx, "0123456789abcdef0123", nil); err != nil {
		t.Fatal(err)
	}
	before.Close()
	after := mk("boot-2")
	if _, _, found, err := after.Adopt(ctx); err != nil || !found {
		t.Fatalf("adopting after the reboot: %v %v", found, err)
	}
	if err := after.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`group masters: 0 of 1 slot\(s\) held, 0 waiting\n  spacing: node-a released last; the next reboot in the group waits (9m5\d|10m0)s more \(lock.min_interval\)`)
	for _, args := range [][]string{{"lock", "status", "--root", root}, {"lock", "status", "--root", root, "--group", "masters"}} {
		code, out, errOut := runIn(args...)
		if code != exitOK || !want.MatchString(out) {
			t.Errorf("%v: exit %d, %s\n%s", args, code, errOut, out)
		}
	}
	code, out, _ := runIn("lock", "status", "--root", root, "--json")
	var gs []lock.GroupStatus
	if err := json.Unmarshal([]byte(out), &gs); code != exitOK || err != nil {
		t.Fatalf("lock status --json: exit %d, %v\n%s", code, err, out)
	}
	if len(gs) != 1 || gs[0].Spacing == nil || gs[0].Spacing.By != "node-a" || gs[0].Spacing.Left < 9*time.Minute {
		t.Errorf("lock status --json = %s", out)
	}
}

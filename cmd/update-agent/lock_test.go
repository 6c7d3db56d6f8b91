package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// lockCluster starts one etcd member and a configuration root pointing at
// it whose [lock] section is lockTOML; ctx bounds the test.
func lockCluster(t *testing.T, lockTOML string) (root string, cli *clientv3.Client, ctx context.Context) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	root = configRoot(t, map[string]string{"50-etcd.toml": fmt.Sprintf("[etcd]\nendpoints = [%q]\n[lock]\n%s", c.Members[0].ClientURL, lockTOML)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return root, c.Client(t, nil), ctx
}

func TestLockSubcommand(t *testing.T) {
	root, cli, ctx := lockCluster(t, "group = \"masters\"\nslots = 1\nreboot_lease_ttl = \"60s\"\n")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(node, group string) *lock.Lock {
		l, err := lock.New(cli, lock.Options{Prefix: "/update-agent/lock", Group: group, Slots: 1, TTL: time.Minute,
			Node: node, BootID: "boot-" + node, StateDir: t.TempDir(), Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b, w := mk("node-a", "masters"), mk("node-b", "masters"), mk("worker-1", "workers")
	for _, l := range []*lock.Lock{a, b, w} {
		if err := l.Announce(ctx, "0123456789abcdef0123"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Acquire(ctx, "0123456789abcdef0123", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Acquire(ctx, "0123456789abcdef0123", nil); err != nil {
		t.Fatal(err)
	}
	bHeld := make(chan error, 1)
	queued := make(chan struct{}, 1)
	go func() {
		_, err := b.Acquire(ctx, "0123456789abcdef0123", func(lock.Position) {
			select {
			case queued <- struct{}{}:
			default:
			}
		})
		bHeld <- err
	}()
	<-queued

	code, out, errOut := runIn("lock", "status", "--root", root)
	if code != exitOK {
		t.Fatalf("lock status: exit %d, %s", code, errOut)
	}
	for _, want := range []string{
		`group masters: 1 of 1 slot\(s\) held, 1 waiting`,
		`holder +node-a +target 0123456789ab +held \d+s +lease (59|60)s left +boot boot-node-a`,
		`waiter 1 +node-b +target 0123456789ab +waiting \d+s`,
		`updates pending: node-a \(0123456789ab\), node-b`,
		`group workers: 1 of 1 slot\(s\) held, 0 waiting`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("lock status output lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = runIn("lock", "status", "--root", root, "--group", "masters", "--json")
	var gs []lock.GroupStatus
	if err := json.Unmarshal([]byte(out), &gs); code != exitOK || err != nil {
		t.Fatalf("lock status --json: exit %d, %v\n%s", code, err, out)
	}
	if len(gs) != 1 || len(gs[0].Holders) != 1 || gs[0].Holders[0].Node != "node-a" ||
		len(gs[0].Waiters) != 1 || gs[0].Waiters[0].Node != "node-b" {
		t.Errorf("lock status --json --group masters = %+v", gs)
	}

	// The operator frees node-a's slot: node-b gets it.
	code, out, errOut = runIn("lock", "release", "--root", root, "node-a")
	if code != exitOK || !strings.Contains(out, "released node-a in group masters") {
		t.Fatalf("lock release: exit %d, %q %q", code, out, errOut)
	}
	select {
	case err := <-bHeld:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("node-b did not get the freed slot")
	}
	code, _, errOut = runIn("lock", "release", "--root", root, "node-a")
	if code != exitFailure || !strings.Contains(errOut, "node-a holds no reboot slot") {
		t.Errorf("releasing twice: exit %d, %q", code, errOut)
	}
	code, out, _ = runIn("lock", "release", "--root", root, "--group", "workers", "worker-1")
	if code != exitOK || !strings.Contains(out, "released worker-1 in group workers") {
		t.Errorf("lock release --group workers: exit %d, %q", code, out)
	}

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"lock"}, exitUsage},
		{[]string{"lock", "steal"}, exitUsage},
		{[]string{"lock", "release", "--root", root}, exitUsage},
		{[]string{"lock", "release", "--root", root, "a", "b"}, exitUsage},
		{[]string{"lock", "release", "--root", root, "node/a"}, exitUsage},
		{[]string{"lock", "release", "--root", root, ""}, exitUsage},
		{[]string{"lock", "release", "--root", root, "node a"}, exitUsage},
		{[]string{"lock", "release", "--root", root, "--group", "x/y", "node-a"}, exitUsage},
		{[]string{"lock", "release", "--root", root, "--bogus", "node-a"}, exitUsage},
		{[]string{"lock", "status", "--root", root, "extra"}, exitUsage},
		{[]string{"lock", "status", "--root", configRoot(t, map[string]string{"50.toml": "[lock]\nslots = 0\n"})}, exitBadConfig},
	} {
		if code, _, errOut := runIn(tc.args...); code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, errOut)
		}
	}
}

// TestLockStatusTLS: the subcommand reads etcd's TLS files from the
// configuration.
func TestLockStatusTLS(t *testing.T) {
	pki := etcdtest.NewPKI(t)
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: pki.Server()})
	// Configured paths are host paths, read under --root.
	frag := fmt.Sprintf("[etcd]\nendpoints = [%q]\nca_file = \"/etc/etcd/ca.pem\"\n"+
		"cert_file = \"/etc/etcd/client.pem\"\nkey_file = \"/etc/etcd/client-key.pem\"\n", c.Members[0].ClientURL)
	root := configRoot(t, map[string]string{"50-etcd.toml": frag})
	os.MkdirAll(filepath.Join(root, "etc/etcd"), 0o755)
	for src, dst := range map[string]string{pki.CAFile: "ca.pem", pki.ClientCertFile: "client.pem", pki.ClientKey: "client-key.pem"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "etc/etcd", dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runIn("lock", "status", "--root", root)
	if code != exitOK || !strings.Contains(out, "no reboot slots held or awaited under /update-agent/lock") {
		t.Errorf("lock status over TLS: exit %d, %q %q", code, out, errOut)
	}
}

// TestLockReleaseFleetLockClient: `lock status` shows a FleetLock client's
// name (fleetlock:<id>) and the address its entry is bound to; `lock
// release` takes that name and frees its slot; the next client in line is
// granted.
func TestLockReleaseFleetLockClient(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	root := configRoot(t, map[string]string{"50-etcd.toml": fmt.Sprintf("[etcd]\nendpoints = [%q]\n", c.Members[0].ClientURL)})
	s, err := fleetlock.New(c.Client(t, nil), fleetlock.Options{Prefix: "/update-agent/lock", Groups: []string{"default"},
		Slots: 1, TTL: time.Minute, MaxHold: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	url := srv.URL + "/v1/pre-reboot"
	if code, body, err := fleetLockPost(workerClient, url, "worker-1"); err != nil || code != http.StatusOK {
		t.Fatalf("worker-1: %d %s %v", code, body, err)
	}
	if code, body, err := fleetLockPost(workerClient, url, "worker-2"); err != nil || code != http.StatusConflict {
		t.Fatalf("worker-2 while worker-1 holds: %d %s %v", code, body, err)
	}
	code, out, _ := runIn("lock", "status", "--root", root)
	if !strings.Contains(out, "fleetlock:worker-1 (FleetLock client) from 127.0.0.9") {
		t.Fatalf("lock status: exit %d\n%s", code, out)
	}

	code, out, errOut := runIn("lock", "release", "--root", root, "fleetlock:worker-1")
	if code != exitOK || !strings.Contains(out, "released fleetlock:worker-1 in group default") {
		t.Fatalf("lock release fleetlock:worker-1: exit %d, %q %q", code, out, errOut)
	}
	if code, body, err := fleetLockPost(workerClient, url, "worker-2"); err != nil || code != http.StatusOK {
		t.Errorf("worker-2 after the release: %d %s %v", code, body, err)
	}
	for _, bad := range []string{"fleetlock:", "fleetlock:a/b", "fleetlock:a b", "fleetlock:w\u00e9", "fleet:worker-1",
		"fleetlock:worker-2 (FleetLock client)"} {
		if code, _, errOut := runIn("lock", "release", "--root", root, bad); code != exitUsage {
			t.Errorf("lock release %q: exit %d, want %d (%s)", bad, code, exitUsage, errOut)
		}
	}
}

// TestLockStatusShowsSpacing: a node that rebooted holding its slot
// releases it; lock status then says the group's next reboot waits for
// lock.min_interval, with or without --group.
func TestLockStatusShowsSpacing(t *testing.T) {
	root, cli, ctx := lockCluster(t, "group = \"masters\"\nslots = 1\nmin_interval = \"10m\"\n")
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

// TestPrintLockStatusSlotsSource: a group whose slot count nobody recorded
// in etcd (agents of an older version) says that this host's lock.slots
// split its queue; a recorded count agreeing with this host's lock.slots,
// or another group's, is not warned about.
func TestPrintLockStatusSlotsSource(t *testing.T) {
	var b strings.Builder
	printLockStatus(&b, "/ua", "", []lock.GroupStatus{
		{Group: "old", Slots: 1},
		{Group: "other", Slots: 3, SlotsBy: "agent x"},
		{Group: "workers", Slots: 2, SlotsBy: "fleetlock server"},
	}, "workers", 2)
	out := b.String()
	old, workers, _ := strings.Cut(out, "group workers")
	if !strings.Contains(old, "not recorded in etcd") || strings.Contains(workers, "not recorded") || strings.Contains(out, "WARNING") {
		t.Errorf("lock status:\n%s", out)
	}
}

// TestLockStatusSlotsDisagree: `lock status` on a host whose lock.slots is
// 2, in a group an agent recorded 1 for, warns naming both counts and the
// writer; where lock.slots agrees it says nothing.
func TestLockStatusSlotsDisagree(t *testing.T) {
	root, cli, ctx := lockCluster(t, "group = \"masters\"\nslots = 2\n")
	l, err := lock.New(cli, lock.Options{Prefix: "/update-agent/lock", Group: "masters", Slots: 1, TTL: time.Minute,
		Node: "node-a", BootID: "boot-a", StateDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Acquire(ctx, "0123456789abcdef0123", nil); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`group masters: 1 of 1 slot\(s\) held, 0 waiting\n  WARNING: agents of group masters disagree on lock.slots: ` +
		`this host's is 2, agent node-a recorded 1 at \d{4}-\d\d-\d\dT[0-9:]+Z; .*lock.slots`)
	code, out, errOut := runIn("lock", "status", "--root", root)
	if code != exitOK || !want.MatchString(out) {
		t.Errorf("exit %d, %s\n%s", code, errOut, out)
	}
	code, out, _ = runIn("lock", "status", "--root", root, "--json")
	var gs []lock.GroupStatus
	if err := json.Unmarshal([]byte(out), &gs); code != exitOK || err != nil || len(gs) != 1 ||
		gs[0].Slots != 1 || gs[0].SlotsBy != "agent node-a" || gs[0].SlotsAt.IsZero() {
		t.Errorf("lock status --json: exit %d, %v\n%s", code, err, out)
	}
}

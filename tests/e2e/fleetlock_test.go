//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/e2e/guestbin"
	"github.com/update-agent/update-agent/tests/e2e/rpmpkg"
	"github.com/update-agent/update-agent/tests/guest"
)

// workerAddr is the address FleetLock serves on and its clients send from
// (set on lo; TEST-NET-1): the guest's etcd member advertises 127.0.0.1, and
// the server refuses clients that are members.
const workerAddr = "192.0.2.10"

// fleetLockConfig serves FleetLock in the guest over its single etcd member.
const fleetLockConfig = `[etcd]
endpoints = ["http://127.0.0.1:2379"]
[fleetlock]
listen = "` + workerAddr + `:8080"
`

// fleetLockPost is zincati's request, in bash (the guest has no curl):
// fleetlock-post ENDPOINT ID prints the HTTP response. Connecting to
// workerAddr, it sends from workerAddr too.
const fleetLockPost = `#!/bin/bash
set -e
body="{\"client_params\":{\"id\":\"$2\",\"group\":\"default\"}}"
exec 3<>/dev/tcp/` + workerAddr + `/8080
printf 'POST /v1/%s HTTP/1.1\r\nHost: ` + workerAddr + `\r\nfleet-lock-protocol: true\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "$1" "${#body}" "$body" >&3
cat <&3
`

// TestFleetLockUnit installs the RPM, enables update-agent-fleetlock as an
// operator does (the preset leaves it disabled) on a host that is not
// rpm-ostree booted, and checks that the sandboxed unit starts as a notify
// service, answers zincati's requests over the guest's etcd and stops
// cleanly.
func TestFleetLockUnit(t *testing.T) {
	g := guest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	pkg := rpmpkg.Build(t)
	stage := filepath.Join(t.TempDir(), "ua-fleetlock")
	if err := os.Mkdir(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	guestbin.Etcd(t, ctx, filepath.Join(stage, "etcd"))
	for name, content := range map[string]string{"50-e2e.toml": fleetLockConfig, "etcd.service": guestbin.EtcdUnit,
		"fleetlock-post": fleetLockPost} {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pkg.Install(t, g)
	g.MustRun(t, "rm -rf /root/ua-fleetlock")
	if err := g.CopyIn(ctx, stage, "/root/ua-fleetlock"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.MustRun(t, strings.Join([]string{
			"systemctl disable --now update-agent-fleetlock.service etcd.service",
			"ip addr del " + workerAddr + "/32 dev lo || true",
			"rm -rf /etc/update-agent/config.d/50-e2e.toml /etc/systemd/system/etcd.service /usr/local/bin/etcd" +
				" /usr/local/bin/fleetlock-post /var/lib/data/etcd /root/ua-fleetlock",
			"systemctl daemon-reload",
		}, "\n"))
	})
	g.MustRun(t, strings.Join([]string{"set -e", "cd /root/ua-fleetlock",
		"install -m0755 etcd fleetlock-post /usr/local/bin/",
		"install -m0644 etcd.service /etc/systemd/system/",
		"install -Dm0644 50-e2e.toml /etc/update-agent/config.d/50-e2e.toml",
		"systemd-tmpfiles --create /usr/lib/tmpfiles.d/update-agent.conf",
		"rm -f /run/ostree-booted",
		"systemctl daemon-reload",
		"systemctl enable --now etcd.service",
		"ip addr replace " + workerAddr + "/32 dev lo",
	}, "\n"))

	const unit = "update-agent-fleetlock.service"
	diag := func() string {
		return g.MustRun(t, "{ ls -l /usr/lib/systemd/system/update-agent*; systemctl status --no-pager -l "+unit+
			"; journalctl -u "+unit+" -b --no-pager | tail -40; } 2>&1; true")
	}
	if out, _, _, err := g.Run(ctx, "systemctl is-enabled "+unit+"; systemctl is-active "+unit); err != nil || out != "disabled\ninactive\n" {
		t.Errorf("after install: is-enabled, is-active = %q, %v; want disabled, inactive (the preset)\n%s", out, err, diag())
	}
	// Type=notify: start returns once the server sent READY=1, so the
	// requests below need no retry.
	if _, _, code, err := g.Run(ctx, "systemctl enable --now "+unit); err != nil || code != 0 {
		t.Fatalf("systemctl enable --now %s: exit %d, %v\n%s", unit, code, err, diag())
	}
	props := g.MustRun(t, "systemctl show -p Type,ActiveState,SubState,NRestarts,StatusText,CapabilityBoundingSet,ProtectSystem "+unit)
	for _, want := range []string{"Type=notify", "ActiveState=active", "SubState=running", "NRestarts=0",
		"StatusText=serving FleetLock on " + workerAddr + ":8080", "CapabilityBoundingSet=", "ProtectSystem=strict"} {
		if !strings.Contains(props, want+"\n") {
			t.Errorf("%s: want %s, have\n%s\n%s", unit, want, props, diag())
		}
	}

	post := func(endpoint, id string) string {
		return g.MustRun(t, "fleetlock-post "+endpoint+" "+id)
	}
	if r := post("pre-reboot", "worker-1"); !strings.HasPrefix(r, "HTTP/1.1 200 ") {
		t.Errorf("pre-reboot worker-1: %q, want 200", r)
	}
	if r := post("pre-reboot", "worker-2"); !strings.HasPrefix(r, "HTTP/1.1 409 ") ||
		!strings.Contains(r, `"kind":"failed_lock_semaphore_full"`) {
		t.Errorf("pre-reboot worker-2: %q, want 409 failed_lock_semaphore_full", r)
	}
	if out := g.MustRun(t, "update-agent lock status"); !strings.Contains(out, "fleetlock:worker-1 (FleetLock client)") {
		t.Errorf("lock status lacks the FleetLock holder:\n%s", out)
	}
	// The sandbox leaves it its metrics socket (ProtectSystem=strict:
	// only RuntimeDirectory= is writable).
	g.MustRun(t, "test -S /run/update-agent/metrics.sock")
	if r := post("steady-state", "worker-1"); !strings.HasPrefix(r, "HTTP/1.1 200 ") {
		t.Errorf("steady-state worker-1: %q, want 200", r)
	}
	if r := post("pre-reboot", "worker-2"); !strings.HasPrefix(r, "HTTP/1.1 200 ") {
		t.Errorf("pre-reboot worker-2 after worker-1's steady-state: %q, want 200", r)
	}

	g.MustRun(t, "systemctl stop "+unit)
	if out := g.MustRun(t, "systemctl show -p ActiveState,Result "+unit); !strings.Contains(out, "ActiveState=inactive\n") ||
		!strings.Contains(out, "Result=success\n") {
		t.Errorf("after stop: %q, want inactive and success\n%s", out, diag())
	}
	log := g.MustRun(t, "journalctl -u "+unit+" -b --no-pager -o cat")
	for _, want := range []string{"FleetLock slot granted", "FleetLock server stopping",
		"FLEETLOCK SERVED OVER PLAIN HTTP ON A NON-LOOPBACK ADDRESS"} {
		if !strings.Contains(log, want) {
			t.Errorf("journal of %s lacks %q:\n%s", unit, want, log)
		}
	}
}

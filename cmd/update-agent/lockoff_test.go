package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

const tcpHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// fakeProc gives a test tree its own /proc: one process named comm, and
// this network namespace's TCP table (tcp lines after the header).
func fakeProc(t *testing.T, root, comm, tcp string) {
	t.Helper()
	proc := filepath.Join(root, "proc")
	for _, f := range []struct{ path, text string }{
		{"42/comm", comm + "\n"},
		{"net/tcp", tcpHeader + tcp},
	} {
		p := filepath.Join(proc, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDaemonRefusesLockOffBesideAMember: with the defaults (etcd.member =
// "auto", no local unit or process) the configuration cannot tell, so the
// daemon asks the host: an etcd process or a listener on etcd's ports
// refuses lock.enabled = false with exit 80, naming the key and its file.
func TestDaemonRefusesLockOffBesideAMember(t *testing.T) {
	const listen2380 = "   0: 0B0200C0:094C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 102 1 0 100 0 0 10 0\n"
	for _, tc := range []struct {
		name, comm, tcp, want string
	}{
		{"etcd process", "etcd", "", `process "etcd" runs (pid 42)`},
		{"a static pod's peer listener", "pause", listen2380, "192.0.2.11:2380"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := configRoot(t, map[string]string{"50-nolock.toml": "[lock]\nenabled = false\n[etcd]\nendpoints = []\n"})
			fakeProc(t, root, tc.comm, tc.tcp)
			t.Setenv("NOTIFY_SOCKET", "")
			code, _, stderr := runIn("daemon", "--root", root)
			if code != exitMemberNoLock || !strings.Contains(stderr, "50-nolock.toml: lock.enabled: false is refused") ||
				!strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want %d: %s", code, exitMemberNoLock, stderr)
			}
		})
	}
}

// TestLockOffChecksAtEveryStep: without the lock, acquisition, adoption
// and fence look at the host again: a worker that starts an etcd member
// while the agent runs holds its reboot. A check that kept its first
// answer would reboot the new member with no slot or quorum check.
func TestLockOffChecksAtEveryStep(t *testing.T) {
	cfg := config.Default()
	cfg.Agent.NodeName = "n1"
	cfg.Lock.Enabled = false
	cfg.Etcd.Endpoints = nil // no cluster to ask: the host alone decides
	root := t.TempDir()
	fakeProc(t, root, "sshd", "")
	a, err := wire(cfg, root, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	l := a.lockPort // the engine's
	if a.lockOff == nil || a.lock != nil || l == nil {
		t.Fatal("lock.enabled = false wired no member check, or a lock")
	}
	ctx := context.Background()
	if _, err := l.Acquire(ctx, "c1"); err != nil {
		t.Fatalf("a worker cannot take its (absent) slot: %v", err)
	}
	if ls, err := l.Adopt(ctx); err != nil || ls != engine.LeaseHolding {
		t.Fatalf("Adopt on a worker = %v, %v", ls, err)
	}
	if err := l.Fence(ctx); err != nil {
		t.Fatalf("a worker cannot fence: %v", err)
	}

	fakeProc(t, root, "etcd", "") // the host now runs a member
	var mn memberNoLock
	if _, err := l.Acquire(ctx, "c1"); !errors.As(err, &mn) {
		t.Errorf("Acquire beside a new member = %v, want memberNoLock", err)
	}
	if _, err := l.Adopt(ctx); !errors.As(err, &mn) {
		t.Errorf("Adopt beside a new member = %v, want memberNoLock", err)
	}
	if err := l.Fence(ctx); !errors.As(err, &mn) {
		t.Errorf("Fence beside a new member = %v, want memberNoLock", err)
	}

	// The host's tables cannot be read: not a worker.
	os.Remove(filepath.Join(root, "proc/42/comm"))
	os.WriteFile(filepath.Join(root, "proc/net/tcp"), []byte(tcpHeader), 0o644)
	os.Chmod(filepath.Join(root, "proc/net/tcp"), 0)
	if os.Geteuid() != 0 {
		if err := l.Fence(ctx); err == nil || errors.As(err, &mn) || !strings.Contains(err.Error(), "cannot tell") {
			t.Errorf("Fence with an unreadable socket table = %v, want a plain error", err)
		}
	}
}

// TestLockOffAsksTheCluster: with etcd.endpoints set the cluster's member
// list is asked too: a member on a port other than etcd's, in a process
// of another name, serving the local endpoint, is this host's. With only
// the default loopback endpoint and nothing serving it, the host is a
// worker; a remote endpoint that does not answer leaves it unknown.
func TestLockOffAsksTheCluster(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	check := func(tcp string, endpoints ...string) error {
		cfg := config.Default()
		cfg.Agent.NodeName = "n1"
		cfg.Lock.Enabled = false
		cfg.Etcd.Endpoints = endpoints
		root := t.TempDir()
		fakeProc(t, root, "sshd", tcp)
		a, err := wire(cfg, root, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		return a.lockOff.Check(t.Context())
	}
	var mn memberNoLock
	if err := check("", c.Members[0].ClientURL); !errors.As(err, &mn) || !strings.Contains(err.Error(), "serves local endpoint") {
		t.Errorf("a member serving the local endpoint: %v, want memberNoLock", err)
	}
	port := freePort(t)
	dead := "http://127.0.0.1:" + strconv.Itoa(port)
	if err := check("", dead); err != nil {
		t.Errorf("nothing serves the loopback endpoint: %v, want a worker", err)
	}
	// Something listens on the endpoint's port but does not answer as etcd
	// (a member refusing our credentials, say): not a worker.
	listening := fmt.Sprintf("   0: 0100007F:%04X 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 100 1 0 100 0 0 10 0\n", port)
	if err := check(listening, dead); err == nil || errors.As(err, &mn) || !strings.Contains(err.Error(), "cannot tell") {
		t.Errorf("a loopback endpoint listened on that does not answer: %v, want unsure", err)
	}
	if err := check("", "http://192.0.2.1:2379"); err == nil || errors.As(err, &mn) || !strings.Contains(err.Error(), "cannot tell") {
		t.Errorf("a remote cluster that does not answer: %v, want unsure", err)
	}
}

// freePort is a TCP port nothing listens on (a moment ago).
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestDoctorLockOff: doctor's reboot lock line fails lock.enabled = false
// beside an etcd member, as the daemon refuses it, and passes it on a
// worker.
func TestDoctorLockOff(t *testing.T) {
	for _, tc := range []struct{ comm, line, want string }{
		{"etcd", "FAIL  reboot lock    /", `50-nolock.toml: lock.enabled: false is refused: this host runs an etcd member: process "etcd" runs`},
		{"sshd", "ok    reboot lock    lock.enabled = false", "this node reboots without a slot (no etcd member found on this host)"},
	} {
		root := configRoot(t, map[string]string{"50-nolock.toml": "[lock]\nenabled = false\n[etcd]\nendpoints = []\n[staging]\npaths = []\n"})
		fakeProc(t, root, tc.comm, "")
		_, out, stderr := runIn("doctor", "--root", root)
		if !strings.Contains(out, tc.line) || !strings.Contains(out, tc.want) {
			t.Errorf("%s: doctor lacks %q ... %q:\n%s%s", tc.comm, tc.line, tc.want, out, stderr)
		}
	}
}

// TestCheckConfigLockOff: check-config reads the host as the daemon does
// (its /proc, not the cluster): lock.enabled = false beside an etcd
// process is a configuration error naming the key and its file.
func TestCheckConfigLockOff(t *testing.T) {
	for _, tc := range []struct {
		comm string
		code int
	}{{"etcd", exitBadConfig}, {"sshd", exitOK}} {
		root := configRoot(t, map[string]string{"50-nolock.toml": "[lock]\nenabled = false\n"})
		fakeProc(t, root, tc.comm, "")
		code, _, stderr := runIn("check-config", "--root", root)
		if code != tc.code || (tc.code != exitOK && !strings.Contains(stderr, `50-nolock.toml: lock.enabled: false is refused: this host runs an etcd member: process "etcd" runs`)) {
			t.Errorf("%s: exit %d, want %d: %s", tc.comm, code, tc.code, stderr)
		}
	}
}

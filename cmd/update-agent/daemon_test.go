package main

import (
	"context"
	"encoding/json"
	"github.com/update-agent/update-agent/agent/sdnotify/sdnotifytest"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/control"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
	"github.com/update-agent/update-agent/tests/testlog"
)

var (
	standinOnce sync.Once
	standinBin  standintest.Binaries
	standinErr  error
)

func standin(t *testing.T) standintest.Binaries {
	t.Helper()
	if !standintest.Have() {
		t.Skip("ostree is not installed")
	}
	standinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "update-agent-standin-")
		if err != nil {
			standinErr = err
			return
		}
		standinBin, standinErr = standintest.Build(dir)
	})
	if standinErr != nil {
		t.Fatal(standinErr)
	}
	return standinBin
}

// listenNotify stands in for systemd's $NOTIFY_SOCKET for the daemon run
// in this process.
func listenNotify(t *testing.T, dir string) *sdnotifytest.Socket {
	n := sdnotifytest.Listen(t, filepath.Join(dir, "notify.sock"))
	t.Setenv("NOTIFY_SOCKET", n.Path)
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDaemonSmoke runs the daemon against the rpm-ostree stand-in, without
// systemd: READY and STATUS reach $NOTIFY_SOCKET; the stager cannot reach
// systemd's bus to undo an interrupted staging, so the engine waits and
// says why instead of going on; status and update-now work over the control
// socket, metrics over theirs, and SIGTERM stops it cleanly. (The full flow
// runs in tests/cycle and in the guest.)
func TestDaemonSmoke(t *testing.T) {
	bin := standin(t)
	env := standintest.New(t, bin)
	env.Publish(env.Ref, 1)
	for _, kv := range env.ClientEnv("update-agent.service") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(env.Dir, "no-bus"))
	out, _, code := env.CLI("", "status", "--json")
	if code != 0 {
		t.Fatalf("status: %d", code)
	}
	st, err := rpmostree.ParseStatus([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	booted, _ := st.Booted()

	root := configRoot(t, map[string]string{"50-test.toml": `
[agent]
rpm_ostree = "` + bin.RpmOstree + `"
check_interval = "1h"
node_name = "node-a"
[lock]
enabled = false
[staging]
scheduler = ""
paths = []
[guard]
enabled = false
`})
	workerHost(t, root)
	notify := listenNotify(t, env.Dir)

	done := make(chan error, 1)
	var stderr testlog.Buffer
	go func() { done <- runDaemon(&cmdEnv{stdout: io.Discard, stderr: &stderr}, []string{"--root", root}) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", stderr.String())
		}
	})

	waitFor(t, "READY", func() bool { return notify.Has("READY=1") })
	if !notify.Has("booted " + short(booted.Target())) {
		t.Errorf("READY status does not name the booted deployment: %v", notify.Messages())
	}
	out, _, _ = env.CLI("", "status", "--json")
	if st, err := rpmostree.ParseStatus([]byte(out)); err != nil || st.UpdateDriver == nil || st.UpdateDriver.Name != "update-agent" {
		t.Errorf("not registered as update driver: %s", out)
	}
	sock := filepath.Join(root, control.DefaultSocket)
	var rep statusReport
	waitFor(t, "the engine to wait for systemd", func() bool {
		raw, err := control.Client{Socket: sock}.Status(context.Background())
		if err != nil {
			return false
		}
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatalf("status JSON: %v\n%s", err, raw)
		}
		return rep.Engine.Action.Kind == "wait" && strings.Contains(rep.Engine.Action.Reason, "connecting to systemd")
	})
	if rep.Engine.OS.Booted.Checksum != booted.Target() || rep.Node != "node-a" {
		t.Errorf("status: %+v", rep)
	}

	code, sout, serr := runIn("status", "--root", root)
	t.Logf("status:\n%s", sout)
	if code != 0 || !strings.Contains(sout, "State:") || !strings.Contains(sout, "connecting to systemd") {
		t.Errorf("status exit %d:\n%s%s", code, sout, serr)
	}
	code, sout, _ = runIn("status", "--json", "--root", root)
	if code != 0 || !json.Valid([]byte(sout)) {
		t.Errorf("status --json exit %d: %s", code, sout)
	}
	if code, sout, serr = runIn("update-now", "--root", root); code != 0 {
		t.Errorf("update-now exit %d: %s%s", code, sout, serr)
	}

	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(root, "run/update-agent/metrics.sock"))
	}}}
	resp, err := c.Get("http://x/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `update_agent_state{state="idle"} 1`) {
		t.Errorf("metrics lack the state:\n%s", body)
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("daemon: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not stop on SIGTERM")
	}
	waitFor(t, "STOPPING", func() bool { return notify.Has("STOPPING=1") })
	if code, _, serr := runIn("status", "--root", root); code != exitFailure || !strings.Contains(serr, "is update-agent.service running") {
		t.Errorf("status without a daemon: exit %d, %s", code, serr)
	}
}

// A host whose updates another driver owns is not taken over.
func TestDaemonRefusesAnotherDriver(t *testing.T) {
	bin := standin(t)
	env := standintest.New(t, bin)
	if _, serr, code := env.CLI("zincati.service", "deploy", "", "--register-driver=zincati"); code != 0 {
		t.Fatalf("registering zincati: %s", serr)
	}
	for _, kv := range env.ClientEnv("update-agent.service") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	root := configRoot(t, map[string]string{"50-test.toml": "[agent]\nrpm_ostree = \"" + bin.RpmOstree + "\"\n[lock]\nenabled = false\n"})
	fakeProc(t, root, "sshd", "")
	t.Setenv("NOTIFY_SOCKET", "")
	code, _, stderr := runIn("daemon", "--root", root)
	if code != exitForeignDriver || !strings.Contains(stderr, "driven by zincati (zincati.service)") ||
		!strings.Contains(stderr, "systemctl mask --now zincati.service") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// workerHost makes root a worker's host for the daemon: a /proc with no
// etcd beside the test, whatever runs on this machine, and a boot ID.
func workerHost(t *testing.T, root string) {
	t.Helper()
	fakeProc(t, root, "sshd", "")
	bootFile := filepath.Join(root, state.BootIDPath)
	if err := os.MkdirAll(filepath.Dir(bootFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bootFile, []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Companion mode beside zincati (its registered driver): the daemon starts
// instead of refusing, leaves zincati the driver, and stops on SIGTERM.
// (Pacing itself needs systemd: companion_test.go and agent/stage.)
func TestDaemonCompanionBesideZincati(t *testing.T) {
	bin := standin(t)
	env := standintest.New(t, bin)
	if _, serr, code := env.CLI("zincati.service", "deploy", "", "--register-driver=zincati"); code != 0 {
		t.Fatalf("registering zincati: %s", serr)
	}
	for _, kv := range env.ClientEnv("update-agent.service") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(env.Dir, "no-bus"))
	root := configRoot(t, map[string]string{"50-test.toml": "[agent]\nrpm_ostree = \"" + bin.RpmOstree + "\"\nnode_name = \"node-a\"\n" +
		"[lock]\nenabled = false\n[updates]\nenabled = false\n[staging]\npace_foreign = true\nscheduler = \"\"\npaths = []\n[guard]\nenabled = false\n"})
	workerHost(t, root)
	notify := listenNotify(t, env.Dir)

	done := make(chan error, 1)
	var stderr testlog.Buffer
	go func() { done <- runDaemon(&cmdEnv{stdout: io.Discard, stderr: &stderr}, []string{"--root", root}) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", stderr.String())
		}
	})
	waitFor(t, "READY or exit", func() bool {
		if notify.Has("READY=1") {
			return true
		}
		select {
		case err := <-done:
			t.Fatalf("daemon exited beside zincati in companion mode: %v", err)
		default:
		}
		return false
	})
	out, _, _ := env.CLI("", "status", "--json")
	if st, err := rpmostree.ParseStatus([]byte(out)); err != nil || st.UpdateDriver == nil || st.UpdateDriver.Name != "zincati" {
		t.Errorf("zincati is no longer the update driver: %s", out)
	}
	if !strings.Contains(stderr.String(), "companion mode: pacing every rpm-ostree transaction") {
		t.Errorf("the companion loop did not start:\n%s", stderr.String())
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("daemon: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not stop on SIGTERM")
	}
}

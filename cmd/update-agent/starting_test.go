package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/testlog"
)

// TestStatusWhileStarting: a daemon whose rpm-ostree has not answered yet
// (rpmostreed still starting at boot) answers status with what it waits
// for, not with "is update-agent.service running?".
func TestStatusWhileStarting(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "rpm-ostree")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(dir, "no-bus"))
	root := configRoot(t, map[string]string{"50-test.toml": `
[agent]
rpm_ostree = "` + hang + `"
node_name = "node-a"
[updates]
backend = "rpm-ostree"
[lock]
enabled = false
[staging]
scheduler = ""
paths = []
[guard]
enabled = false
`})
	workerHost(t, root)
	listenNotify(t, dir)

	done := make(chan error, 1)
	var stderr testlog.Buffer
	go func() { done <- runDaemon(&cmdEnv{stdout: io.Discard, stderr: &stderr}, []string{"--root", root}) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", stderr.String())
		}
	})
	var sout, serr string
	waitFor(t, "status to answer", func() bool {
		var code int
		code, sout, serr = runIn("status", "--root", root)
		return code == exitOK
	})
	if !strings.Contains(sout, "starting: waiting for rpm-ostree") {
		t.Errorf("status while rpm-ostree has not answered:\n%s%s", sout, serr)
	}
	if code, sout, _ := runIn("status", "--json", "--root", root); code != exitOK || !strings.Contains(sout, `"starting": "waiting for rpm-ostree"`) {
		t.Errorf("status --json: exit %d\n%s", code, sout)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not stop on SIGTERM")
	}
}

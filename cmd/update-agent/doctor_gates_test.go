package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestDoctorGateHolding (issue 18): with every other check ok, gates that
// hold a reboot now (a firing alert on a TLS Alertmanager, a gate command
// exiting 1) fail the gates line, naming each gate and what it saw, and
// doctor exits 1; once they let the node go, doctor passes.
func TestDoctorGateHolding(t *testing.T) {
	bin := useStandin(t)
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	m0 := c.Members[0]
	pki := etcdtest.NewPKI(t)
	var alerts atomic.Value
	am := tlsAlertmanager(t, pki, &alerts)
	gate := filepath.Join(t.TempDir(), "maintenance-ok")
	files := amTLSFiles(t, pki, am.URL, "^Etcd")
	files["50-test.toml"] = `
[agent]
rpm_ostree = "` + bin.RpmOstree + `"
[etcd]
endpoints = ["` + m0.ClientURL + `"]
dial_timeout = "1s"
[guard]
metrics_url = "` + m0.ClientURL + `/metrics"
[staging]
paths = []
[[gates.commands]]
argv = ["` + gate + `", "--cluster", "prod"]
timeout = "10s"
`
	root := configRoot(t, files)
	for _, tc := range []struct {
		name, alerts, exit string
		code               int
		want               string
	}{
		{"gates hold", "[" + firingEtcd + "]", "exit 1", exitWaiting,
			"WAIT  reboot gates   holding a reboot: alerts: firing: EtcdMembersDown; command: " + gate + " --cluster prod: "},
		{"gates let go", "[" + firingWatchdog + "]", "exit 0", exitOK,
			"ok    reboot gates   etcd-alarms: no active etcd alarm; alerts: no matching alert firing; command: " + gate + " --cluster prod: exit 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alerts.Store(tc.alerts)
			if err := os.WriteFile(gate, []byte("#!/bin/sh\necho maintenance freeze >&2\n"+tc.exit+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			code, out, stderr := runIn("doctor", "--root", root)
			t.Logf("doctor:\n%s%s", out, stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("doctor output lacks %q", tc.want)
			}
			if tc.code != exitOK && !strings.Contains(stderr, "doctor: no check failed; 1 check(s) found reboots held now (WAIT)") {
				t.Errorf("want only the gates line waiting: %s", stderr)
			}
		})
	}
}

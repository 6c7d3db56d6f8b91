package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// TestDoctor runs doctor against a real embedded etcd and the rpm-ostree
// stand-in: every line ok with the local member found through the local
// endpoint; a broken rpm-ostree path and an unreachable etcd each fail
// their line and exit 1.
func TestDoctor(t *testing.T) {
	bin := standin(t)
	env := standintest.New(t, bin)
	for _, kv := range env.ClientEnv("") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	c := etcdtest.Start(t, etcdtest.Options{})
	m0 := c.Members[0]
	conf := func(rpmOstree, endpoint string) string {
		return `
[agent]
rpm_ostree = "` + rpmOstree + `"
[etcd]
endpoints = ["` + endpoint + `"]
dial_timeout = "1s"
[guard]
metrics_url = "` + m0.ClientURL + `/metrics"
[staging]
paths = []
`
	}

	root := configRoot(t, map[string]string{"50-test.toml": conf(bin.RpmOstree, m0.ClientURL)})
	code, out, stderr := runIn("doctor", "--root", root)
	t.Logf("doctor:\n%s%s", out, stderr)
	if code != exitOK {
		t.Errorf("exit %d, want 0", code)
	}
	for _, want := range []string{
		"ok    etcd           reachable at " + m0.ClientURL + ", TLS and auth accepted; 3 member(s)",
		"ok    local member   member m0: serves local endpoint " + m0.ClientURL,
		"ok    leader         ",
		"ok    member health  3 member(s) healthy (3 voting)",
		"ok    etcd alarms    none active",
		"ok    etcd metrics   " + m0.ClientURL + "/metrics serves etcd_disk_wal_fsync_duration_seconds",
		`ok    etcd cgroup    etcd.local_unit = ""`,
		"ok    rpm-ostree     status readable: booted ",
		"ok    staging disks  staging.paths is empty",
		"ok    reboot lock    group default: 0 of 1 slot(s) held, 0 waiting",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	broken := configRoot(t, map[string]string{"50-test.toml": conf("/nonexistent/rpm-ostree", "http://127.0.0.1:1")})
	code, out, stderr = runIn("doctor", "--root", broken)
	t.Logf("doctor, broken:\n%s%s", out, stderr)
	if code != exitFailure || !strings.Contains(stderr, "doctor: 7 check(s) failed") {
		t.Errorf("exit %d, want %d with 7 failed checks", code, exitFailure)
	}
	for _, want := range []string{
		"FAIL  etcd           no endpoint accepted a status request: http://127.0.0.1:1: ",
		"FAIL  local member   not checked: etcd did not answer",
		"FAIL  rpm-ostree     ",
		"FAIL  reboot lock    not checked: etcd did not answer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	// Auth on: without credentials the etcd line fails on the read; with
	// the right user it passes.
	ac := etcdtest.Start(t, etcdtest.Options{Members: 1, AuthRootPassword: "s3cret"})
	ep := ac.Members[0].ClientURL
	noAuth := configRoot(t, map[string]string{"50-test.toml": conf(bin.RpmOstree, ep)})
	code, out, _ = runIn("doctor", "--root", noAuth)
	if want := "FAIL  etcd           no endpoint accepted a status request: " + ep + ": etcdserver: user name is empty"; code != exitFailure || !strings.Contains(out, want) {
		t.Errorf("auth on, no user: exit %d, output lacks %q:\n%s", code, want, out)
	}
	withAuth := configRoot(t, map[string]string{"50-test.toml": conf(bin.RpmOstree, ep), "60-auth.toml": `
[etcd]
username = "root"
password_file = "/etc/etcd-password"
`, "../../etcd-password": "s3cret\n"})
	// A password file readable only by root, as the agent may insist on.
	if err := os.Chmod(filepath.Join(withAuth, "etc/etcd-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runIn("doctor", "--root", withAuth)
	if !strings.Contains(out, "ok    etcd           reachable at "+ep+", TLS and auth accepted; 1 member(s)") {
		t.Errorf("auth on, user root: exit %d:\n%s%s", code, out, stderr)
	}
}

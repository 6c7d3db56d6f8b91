package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// TestDoctor runs doctor against a real embedded etcd and the rpm-ostree
// stand-in: every line ok with the local member found through the local
// endpoint; a broken rpm-ostree path and an unreachable etcd each fail
// their line and exit 1.
func TestDoctor(t *testing.T) {
	bin := useStandin(t)
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
		"ok    origin         ostree ref ",
		"ok    staging disks  staging.paths is empty",
		"ok    io control     iocost: no (the kernel has no iocost (no io.cost.qos in the root cgroup)); io.latency: unknown", // staging.iocost is opt-in
		"ok    reboot lock    group default: 0 of 1 slot(s) held, 0 waiting",
		"ok    reboot gates   etcd-alarms: no active etcd alarm",
		"ok    machine config no machine-config-daemon on this host",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	// Fedora CoreOS's graph beside updates.source = "origin", and the
	// machine-config-daemon's state directory with updates.enabled: both
	// fail, naming the keys to set.
	offGraph := configRoot(t, map[string]string{"50-test.toml": conf(bin.RpmOstree, m0.ClientURL) + "[updates]\nsource = \"origin\"\n"})
	for p, c := range map[string]string{"etc/zincati/config.d/50-fedora-coreos-cincinnati.toml": "[cincinnati]\nbase_url = \"https://updates.example\"\n",
		"etc/machine-config-daemon/currentconfig": "{}"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(offGraph, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(offGraph, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, stderr = runIn("doctor", "--root", offGraph)
	if code != exitFailure || !strings.Contains(stderr, "doctor: 2 check(s) failed") {
		t.Errorf("off the graph, under the MCO: exit %d, want %d with 2 failed checks:\n%s%s", code, exitFailure, out, stderr)
	}
	for _, want := range []string{
		"FAIL  origin         ostree ref ", "this host has an update graph (cincinnati.base_url https://updates.example in zincati's " +
			filepath.Join(offGraph, "etc/zincati/config.d/50-fedora-coreos-cincinnati.toml") + ") that updates.source = origin (set in " +
			filepath.Join(offGraph, etcConfD, "50-test.toml") + ") does not follow",
		"FAIL  machine config " + filepath.Join(offGraph, "etc/machine-config-daemon") + " exists: ", "set updates.enabled = false (now true, from default)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}

	// The same host with the agent as a companion: zincati's graph and the
	// MCO drive it, the agent paces their transactions; nothing fails.
	if err := os.WriteFile(filepath.Join(offGraph, etcConfD, "60-companion.toml"), []byte("[updates]\nenabled = false\n[staging]\npace_foreign = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runIn("doctor", "--root", offGraph)
	if code != exitOK {
		t.Errorf("companion mode: exit %d, want 0:\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		"ok    origin         ostree ref ",
		"ok    machine config ",
		"ok    companion mode on (staging.pace_foreign = true, updates.enabled = false)", "rpm-ostree is idle",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("companion mode: doctor output lacks %q:\n%s", want, out)
		}
	}

	// A member's host serving its own zincati (packaging/examples/
	// member-with-zincati): the line reads zincati's fragment and dials
	// the server its base_url names.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	member := configRoot(t, map[string]string{"50-test.toml": conf(bin.RpmOstree, m0.ClientURL) +
		"[fleetlock]\nlisten = \"" + ln.Addr().String() + "\"\nserve_local_member = true\n"})
	zfrag := filepath.Join(member, "etc/zincati/config.d/55-updates-strategy.toml")
	if err := os.MkdirAll(filepath.Dir(zfrag), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(zfrag, []byte("[updates]\nstrategy = \"fleet_lock\"\n[updates.fleet_lock]\nbase_url = \"http://"+ln.Addr().String()+"/\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, out, _ = runIn("doctor", "--root", member)
	if want := `ok    fleetlock local member this host's zincati gets member semantics: [updates] strategy "fleet_lock" and base_url "http://` +
		ln.Addr().String() + `/" (` + zfrag + `) name the FleetLock server on loopback`; !strings.Contains(out, want) {
		t.Errorf("serving the local member: doctor output lacks %q:\n%s", want, out)
	}
	ln.Close()
	code, out, _ = runIn("doctor", "--root", member)
	if want := "FAIL  fleetlock local member fleetlock.serve_local_member (set in " + filepath.Join(member, etcConfD, "50-test.toml") +
		"): nothing answers at zincati's base_url"; code != exitFailure || !strings.Contains(out, want) {
		t.Errorf("no server: exit %d, doctor output lacks %q:\n%s", code, want, out)
	}

	broken := configRoot(t, map[string]string{"50-test.toml": conf("/nonexistent/rpm-ostree", "http://127.0.0.1:1")})
	code, out, stderr = runIn("doctor", "--root", broken)
	t.Logf("doctor, broken:\n%s%s", out, stderr)
	// etcd's line fails; the checks it makes impossible are SKIP, not failures.
	if code != exitFailure || !strings.Contains(stderr, "doctor: 4 check(s) failed") {
		t.Errorf("exit %d, want %d with 4 failed checks", code, exitFailure)
	}
	for _, want := range []string{
		"FAIL  etcd           no endpoint accepted a status request: http://127.0.0.1:1: connection refused",
		"SKIP  local member   not checked: etcd did not answer",
		"FAIL  rpm-ostree     ",
		"FAIL  origin         not checked: rpm-ostree status unreadable",
		"SKIP  reboot lock    not checked: etcd did not answer",
		"FAIL  reboot gates   holding a reboot: etcd-alarms: cannot list etcd alarms: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	// --json: the same checks, one object each, and the same exit code.
	code, out, _ = runIn("doctor", "--json", "--root", broken)
	var checks []struct{ Check, Result, Detail string }
	if err := json.Unmarshal([]byte(out), &checks); err != nil || code != exitFailure {
		t.Fatalf("doctor --json: exit %d, %v:\n%s", code, err, out)
	}
	got := map[string]string{}
	for _, c := range checks {
		got[c.Check] = c.Result + " " + c.Detail
	}
	if !strings.HasPrefix(got["etcd"], "FAIL no endpoint accepted a status request: http://127.0.0.1:1: connection refused") ||
		!strings.HasPrefix(got["local member"], "SKIP not checked") || !strings.HasPrefix(got["staging disks"], "ok ") {
		t.Errorf("doctor --json: %q", got)
	}

	// Auth on (over TLS: a password never goes over plain http): without a
	// user the etcd line fails on the read; with the right user it passes.
	pki := etcdtest.NewPKI(t)
	ac := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: pki.Server(), AuthRootPassword: "s3cret"})
	ep := ac.Members[0].ClientURL
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tlsFiles := map[string]string{"50-test.toml": conf(bin.RpmOstree, ep), "55-tls.toml": `
[etcd]
ca_file = "/etc/etcd-ca.pem"
cert_file = "/etc/etcd-client.pem"
key_file = "/etc/etcd-client-key.pem"
`, "../../etcd-ca.pem": read(pki.CAFile), "../../etcd-client.pem": read(pki.ClientCertFile), "../../etcd-client-key.pem": read(pki.ClientKey)}
	noAuth := configRoot(t, tlsFiles)
	code, out, _ = runIn("doctor", "--root", noAuth)
	// The client certificate's name is no etcd user with rights: the read
	// is denied.
	if want := "FAIL  etcd           " + ep + " answer(s), but reading under /update-agent/lock failed (TLS client certificate, user or permissions?): etcdserver: permission denied"; code != exitFailure || !strings.Contains(out, want) {
		t.Errorf("auth on, no user: exit %d, output lacks %q:\n%s", code, want, out)
	}
	tlsFiles["60-auth.toml"] = `
[etcd]
username = "root"
password_file = "/etc/etcd-password"
`
	tlsFiles["../../etcd-password"] = "s3cret\n"
	withAuth := configRoot(t, tlsFiles)
	// A password file readable only by root, as the agent insists on.
	if err := os.Chmod(filepath.Join(withAuth, "etc/etcd-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runIn("doctor", "--root", withAuth)
	if !strings.Contains(out, "ok    etcd           reachable at "+ep+", TLS and auth accepted; 1 member(s)") ||
		!strings.Contains(out, "ok    etcd rights    user root has the root role: the lock prefix and MoveLeader allowed") {
		t.Errorf("auth on, user root: exit %d:\n%s%s", code, out, stderr)
	}

	// A user allowed on the lock prefix only (what the TLS example used to
	// ask for): the lock works, MoveLeader would be refused at a leader's
	// reboot, so doctor fails while leader.move_leader is on.
	pwFile := filepath.Join(t.TempDir(), "root-password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin, err := etcdclient.New(etcdclient.Options{Endpoints: []string{ep}, CAFile: pki.CAFile, CertFile: pki.ClientCertFile,
		KeyFile: pki.ClientKey, Username: "root", PasswordFile: pwFile, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := t.Context()
	for _, step := range []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "update-agent"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "update-agent", "/update-agent/", clientv3.GetPrefixRangeEnd("/update-agent/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "agent", "pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "agent", "update-agent"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	// etcd checks a password with bcrypt: on a loaded CI machine that can
	// take longer than the 1 s dial timeout above.
	tlsFiles["60-auth.toml"] = "[etcd]\nusername = \"agent\"\npassword_file = \"/etc/etcd-password\"\ndial_timeout = \"10s\"\n"
	tlsFiles["../../etcd-password"] = "pw\n"
	for _, moveLeader := range []bool{true, false} {
		tlsFiles["70-leader.toml"] = fmt.Sprintf("[leader]\nmove_leader = %v\n", moveLeader)
		lockOnly := configRoot(t, tlsFiles)
		if err := os.Chmod(filepath.Join(lockOnly, "etc/etcd-password"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, stderr = runIn("doctor", "--root", lockOnly)
		want := "FAIL  etcd rights    user agent lacks the root role: MoveLeader (leader.move_leader = true) is an admin call"
		if !moveLeader {
			want = "ok    etcd rights    user agent may use the lock prefix; no admin call needed (leader.move_leader = false)"
		}
		if !strings.Contains(out, want) || !strings.Contains(out, "ok    etcd           reachable at ") {
			t.Errorf("auth on, user agent, move_leader %v: exit %d, lacks %q:\n%s%s", moveLeader, code, want, out, stderr)
		}
	}
}

// useStandin points this process's rpm-ostree client environment at a
// fresh stand-in sysroot, as doctor runs in-process, and returns the
// stand-in's binaries.
func useStandin(t *testing.T) standintest.Binaries {
	bin := standin(t)
	env := standintest.New(t, bin)
	for _, kv := range env.ClientEnv("") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return bin
}

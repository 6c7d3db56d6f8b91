package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/netns"
)

// TestDoctorShippedControlPlaneExample: with the shipped 3-node example
// (member = "auto", local_unit set, endpoints the members' own addresses),
// doctor on the second node's host, in a network namespace where that host
// is 192.0.2.12, finds member cp2 by its peer URL. The other lines depend
// on systemd and rpm-ostree, absent here, and are not asserted.
func TestDoctorShippedControlPlaneExample(t *testing.T) {
	if !netns.Enter(t, "192.0.2.0/24", "192.0.2.12/32") {
		return
	}
	eps := etcdtest.StartOnHosts(t, []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"})
	frags := map[string]string{
		"99-test.toml": "[etcd]\nendpoints = [\"" + strings.Join(eps, `", "`) + "\"]\nca_file = \"\"\ncert_file = \"\"\nkey_file = \"\"\n",
	}
	src, _ := filepath.Glob("../../packaging/examples/control-plane-3-node/*.toml")
	if len(src) == 0 {
		t.Fatal("no shipped control-plane example")
	}
	for _, f := range src {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		frags[filepath.Base(f)] = string(b)
	}
	_, out, stderr := runIn("doctor", "--root", configRoot(t, frags))
	t.Logf("doctor:\n%s%s", out, stderr)
	for _, want := range []string{
		"ok    etcd           reachable at " + strings.Join(eps, ", "),
		"ok    local member   member cp2: peer URL http://192.0.2.12:2380 matches 192.0.2.12 on lo",
		"ok    member health  3 member(s) healthy",
		"ok    reboot lock    group control-plane: 0 of 1 slot(s) held",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}
}

// TestDoctorMemberByDNSName: the shipped example with etcd.local_unit unset
// and members that advertise DNS names (resolved by the test's /etc/hosts,
// the host's own name being none of them): doctor on the second node's host
// finds member cp2 by the address behind its name and says what resolved.
func TestDoctorMemberByDNSName(t *testing.T) {
	hosts := map[string]string{"etcd-1.cluster.internal": "192.0.2.11", "etcd-2.cluster.internal": "192.0.2.12", "etcd-3.cluster.internal": "192.0.2.13"}
	if !netns.EnterWithEtc(t, netns.Resolving(hosts), "192.0.2.0/24", "192.0.2.12/32") {
		return
	}
	eps := etcdtest.StartOnNamedHosts(t, []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"},
		[]string{"etcd-1.cluster.internal", "etcd-2.cluster.internal", "etcd-3.cluster.internal"})
	frags := map[string]string{
		"99-test.toml": "[etcd]\nendpoints = [\"" + strings.Join(eps, `", "`) + "\"]\nca_file = \"\"\ncert_file = \"\"\nkey_file = \"\"\nlocal_unit = \"\"\n",
	}
	src, _ := filepath.Glob("../../packaging/examples/control-plane-3-node/*.toml")
	if len(src) == 0 {
		t.Fatal("no shipped control-plane example")
	}
	for _, f := range src {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		frags[filepath.Base(f)] = string(b)
	}
	_, out, stderr := runIn("doctor", "--root", configRoot(t, frags))
	t.Logf("doctor:\n%s%s", out, stderr)
	want := "ok    local member   member cp2: peer URL http://etcd-2.cluster.internal:2380: etcd-2.cluster.internal resolves to 192.0.2.12, which matches 192.0.2.12 on lo"
	if !strings.Contains(out, want) {
		t.Errorf("doctor output lacks %q", want)
	}
}

// Package netns runs a test inside a network namespace it makes, so that a
// test can give "this host" addresses that are not loopback (192.0.2.0/24,
// TEST-NET-1) and run servers on them. It needs root and iproute2; without
// them the test fails, it never skips.
//
// The test re-executes its own binary inside the namespace (ip netns exec):
// Go moves goroutines between threads, so a whole process in the namespace
// is the robust way to have every socket and netlink call there.
package netns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// childEnv holds, in the re-executed binary, the name of the test that runs
// inside the namespace.
const childEnv = "UA_NETNS_TEST"

// Enter runs the calling top-level test inside a new network namespace with
// lo up, addrs (CIDR, e.g. "192.0.2.11/32") on lo and the range local
// routed to lo, so servers may listen on any of its addresses while only
// addrs are the host's own (AnyIP). In the test process Enter makes the
// namespace, runs the test again inside it, reports that run's output and
// result, deletes the namespace and returns false; inside it returns true:
// the caller then runs the test's body.
func Enter(t *testing.T, local string, addrs ...string) bool {
	t.Helper()
	return EnterWithEtc(t, nil, local, addrs...)
}

// EnterWithEtc is Enter with files of /etc replaced inside the namespace
// (name -> content, e.g. "hosts", "resolv.conf", "nsswitch.conf"): ip netns
// exec bind-mounts /etc/netns/<namespace>/<name> over /etc/<name> in a
// private mount namespace, so the test resolves names as it says and the
// host's files stay as they are.
func EnterWithEtc(t *testing.T, etc map[string]string, local string, addrs ...string) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	ns := fmt.Sprintf("ua-test-%d", os.Getpid())
	if len(etc) > 0 {
		dir := filepath.Join("/etc/netns", ns)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("making %s (this test needs root): %v", dir, err)
		}
		t.Cleanup(func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Errorf("removing %s: %v", dir, err)
			}
			_ = os.Remove("/etc/netns") // only when no other namespace has files there
		})
		for name, content := range etc {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	IP(t, "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	IP(t, "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	for _, a := range addrs {
		IP(t, "netns", "exec", ns, "ip", "addr", "add", a, "dev", "lo")
	}
	if local != "" {
		IP(t, "netns", "exec", ns, "ip", "route", "add", "local", local, "dev", "lo")
	}
	args := []string{"netns", "exec", ns, os.Args[0], "-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.v", "-test.count=1"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in network namespace %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("the test in network namespace %s failed: %v", ns, err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the test did not run in network namespace %s", ns)
	}
	return false
}

// IP runs ip(8) with args, failing the test on an error.
func IP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s (this test needs root and iproute2)", strings.Join(args, " "), err, out)
	}
}

// Resolving is the /etc of EnterWithEtc for a test that resolves names as
// it says: /etc/hosts maps each name of hosts (name -> address), and any
// other name goes to a name server at 192.0.2.53, an address of the test
// range routed to lo where nothing listens, so it fails at once instead of
// asking the real network.
func Resolving(hosts map[string]string) map[string]string {
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for name, addr := range hosts {
		fmt.Fprintf(&b, "%s %s\n", addr, name)
	}
	return map[string]string{
		"hosts":         b.String(),
		"nsswitch.conf": "hosts: files dns\n",
		"resolv.conf":   "nameserver 192.0.2.53\noptions timeout:1 attempts:1\n",
	}
}

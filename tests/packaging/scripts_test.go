package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

var scriptletHeader = regexp.MustCompile(`^(\w+) scriptlet \(using (\S+)\):$`)

// scriptlets parses `rpm -qp --scripts` into kind -> body, e.g.
// "postinstall" -> "systemctl ...". Every interpreter must be /bin/sh.
func scriptlets(t *testing.T, b *built) map[string]string {
	t.Helper()
	out := mustRun(t, b.root, "rpm", "-qp", "--scripts", b.rpm)
	scripts := map[string]string{}
	var kind string
	for _, line := range strings.Split(out, "\n") {
		if m := scriptletHeader.FindStringSubmatch(line); m != nil {
			kind = m[1]
			if m[2] != "/bin/sh" {
				t.Errorf("%s scriptlet runs under %s, want /bin/sh", kind, m[2])
			}
			continue
		}
		if kind == "" {
			t.Fatalf("rpm --scripts: text before any scriptlet header: %q", line)
		}
		scripts[kind] += line + "\n"
	}
	return scripts
}

// units are the package's systemd units, as every scriptlet names them.
const units = "update-agent.service update-agent-fleetlock.service"

func TestScriptletText(t *testing.T) {
	b := getBuild(t)
	scripts := scriptlets(t, b)
	// systemd's own macros (Fedora) call systemd-update-helper; the spec's
	// fallbacks (Debian's rpm) call systemctl as the macros once did. Both
	// units, the agent's and the FleetLock server's, in each.
	want := map[string][]string{
		"postinstall":   {"systemctl daemon-reload", "systemctl --no-reload preset " + units},
		"preuninstall":  {"systemctl --no-reload disable --now " + units},
		"postuninstall": {"systemctl daemon-reload", "systemctl try-restart " + units},
	}
	if strings.Contains(scripts["postinstall"], "systemd-update-helper") {
		want = map[string][]string{
			"postinstall":   {"systemd-update-helper install-system-units " + units},
			"preuninstall":  {"systemd-update-helper remove-system-units " + units},
			"postuninstall": {"systemd-update-helper mark-restart-system-units " + units},
		}
	}
	if len(scripts) != len(want) {
		t.Errorf("scriptlets %q, want exactly %d (post, preun, postun)", keys(scripts), len(want))
	}
	for kind, lines := range want {
		for _, l := range lines {
			if !strings.Contains(scripts[kind], l) {
				t.Errorf("%s scriptlet lacks %q:\n%s", kind, l, scripts[kind])
			}
		}
	}
}

func keys(m map[string]string) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	return k
}

// TestScriptletBehaviour runs the fallback scriptlets under /bin/sh -e (stricter
// than rpm, which runs them without -e) with a
// recording systemctl, the way rpm runs them: $1 is the number of package
// instances left after the transaction (1 install, 2 upgrade, 0 erase).
func TestScriptletBehaviour(t *testing.T) {
	b := getBuild(t)
	scripts := scriptlets(t, b)
	if strings.Contains(scripts["postinstall"], "systemd-update-helper") {
		t.Skip("built with systemd's own macros; their behaviour is systemd's")
	}
	const svc = units
	cases := []struct {
		kind, arg string
		want      []string
	}{
		{"postinstall", "1", []string{"daemon-reload", "--no-reload preset " + svc}},
		{"postinstall", "2", []string{"daemon-reload"}},
		{"preuninstall", "0", []string{"--no-reload disable --now " + svc}},
		{"preuninstall", "1", nil},
		{"postuninstall", "0", []string{"daemon-reload"}},
		{"postuninstall", "1", []string{"daemon-reload", "try-restart " + svc}},
	}
	for _, fail := range []bool{false, true} {
		for _, c := range cases {
			got := runScriptlet(t, scripts[c.kind], c.arg, fail)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s with $1=%s (systemctl failing: %v): systemctl calls %q, want %q",
					c.kind, c.arg, fail, got, c.want)
			}
		}
	}
}

// runScriptlet runs body with $1=arg and returns the systemctl argument lists
// it made. With fail, systemctl exits 1: a scriptlet must still succeed, or
// a missing or broken systemd would fail the rpm transaction.
func runScriptlet(t *testing.T, body, arg string, fail bool) []string {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	exit := "0"
	if fail {
		exit = "1"
	}
	fake := "#!/bin/sh\necho \"$*\" >>\"" + log + "\"\nexit " + exit + "\n"
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-e", "-c", body, "sh", arg)
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scriptlet with $1=%s failed: %v\n%s\n%s", arg, err, out, body)
	}
	data, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

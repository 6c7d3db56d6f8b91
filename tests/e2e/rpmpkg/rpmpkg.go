// Package rpmpkg builds update-agent's RPM from the work tree (`make
// rpm-payload`) and installs it in a test guest as rpm would: its payload
// unpacked at /, then its %post run as on a first install. The guest is
// Debian without rpm, so this is the package's files and scriptlet, not
// rpm's database.
package rpmpkg

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
)

// Package is the RPM of this test binary.
type Package struct {
	// Version is the package version, unique to this build: the binary
	// prints it, so a test can tell the installed agent from any other.
	Version string
	// BuildTime is how long make rpm-payload took.
	BuildTime time.Duration
	payload   []byte // the payload as a tar, owned by root
	postIn    string // %post
	postProg  string // %post's interpreter
}

var (
	once     sync.Once
	built    *Package
	buildErr error
)

// Build builds the RPM once per test binary (without %check: the unit tests
// run elsewhere) and fails t if that fails.
func Build(t testing.TB) *Package {
	t.Helper()
	once.Do(func() {
		built, buildErr = build()
		if buildErr == nil {
			t.Logf("built the RPM %s in %s", built.Version, built.BuildTime.Round(100*time.Millisecond))
		}
	})
	if buildErr != nil {
		t.Fatalf("building the RPM for the guest: %v", buildErr)
	}
	return built
}

func build() (*Package, error) {
	for _, tool := range []string{"rpmbuild", "rpm", "rpm2cpio", "cpio"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found: the guest e2e installs the RPM (Debian: apt-get install rpm rpm2cpio cpio; .ci/run does)", tool)
		}
	}
	root, err := modroot.Dir()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "update-agent-e2e-rpm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	base, err := Run(root, "packaging/rpm.sh", "version")
	if err != nil {
		return nil, err
	}
	p := &Package{Version: fmt.Sprintf("%s.e2e%d", strings.TrimSpace(base), time.Now().UnixNano())}
	payload := filepath.Join(tmp, "payload")
	start := time.Now()
	if _, err := Run(root, "make", "--no-print-directory", "rpm-payload", "DISTDIR="+filepath.Join(tmp, "dist"),
		"PAYLOAD_DIR="+payload, "RPMBUILD_OPTS=--nocheck", "RPM_VERSION="+p.Version); err != nil {
		return nil, err
	}
	p.BuildTime = time.Since(start)
	if err := checkPayload(payload); err != nil {
		return nil, err
	}
	rpms, _ := filepath.Glob(filepath.Join(tmp, "dist", "update-agent-"+p.Version+"-*.rpm"))
	var rpm string
	for _, f := range rpms {
		if !strings.HasSuffix(f, ".src.rpm") {
			rpm = f
		}
	}
	if rpm == "" {
		return nil, fmt.Errorf("no binary RPM of version %s among %q", p.Version, rpms)
	}
	if p.postProg, err = Run(root, "rpm", "-qp", "--qf", "%{POSTINPROG}", rpm); err != nil {
		return nil, err
	}
	if p.postIn, err = Run(root, "rpm", "-qp", "--qf", "%{POSTIN}", rpm); err != nil {
		return nil, err
	}
	if p.postProg == "(none)" || strings.HasPrefix(p.postProg, "<") {
		return nil, fmt.Errorf("%s: %%post interpreter %q: want a shell", rpm, p.postProg)
	}
	if p.postIn == "(none)" {
		p.postIn = ""
	}
	// One tar keeps the payload's symlinks (rpm's .build-id links) as links;
	// scp -r would copy their targets.
	tar := filepath.Join(tmp, "payload.tar")
	if _, err := Run(payload, "tar", "--owner=0", "--group=0", "--numeric-owner", "-cf", tar, "."); err != nil {
		return nil, err
	}
	if p.payload, err = os.ReadFile(tar); err != nil {
		return nil, err
	}
	return p, nil
}

// checkPayload fails on a payload that would install nothing useful.
func checkPayload(dir string) error {
	for _, f := range []string{"usr/bin/update-agent", "usr/lib/systemd/system/update-agent.service"} {
		fi, err := os.Lstat(filepath.Join(dir, f))
		if err != nil {
			return fmt.Errorf("the RPM's payload lacks /%s: %w", f, err)
		}
		if !fi.Mode().IsRegular() || fi.Size() == 0 {
			return fmt.Errorf("the RPM's payload: /%s is %v, %d bytes: want a non-empty file", f, fi.Mode(), fi.Size())
		}
		if f == "usr/bin/update-agent" && fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("the RPM's payload: /%s is not executable (%v)", f, fi.Mode())
		}
	}
	return nil
}

// Install unpacks the payload at / in the guest (modes and links as in the
// RPM, existing directories left as they are) and runs %post with $1 = 1,
// a first install: a daemon-reload and the preset, which leaves the unit
// disabled until an operator enables it. It checks the installed binary
// is this build.
func (p *Package) Install(t testing.TB, g *guest.Guest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := p.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	g.MustRun(t, "rm -rf /root/ua-rpm")
	if err := g.CopyIn(ctx, dir, "/root/ua-rpm"); err != nil {
		t.Fatal(err)
	}
	script := []string{"set -e", "tar -xf /root/ua-rpm/payload.tar -C / --no-overwrite-dir"}
	if p.postIn != "" {
		script = append(script, p.postProg+" /root/ua-rpm/post.sh 1")
	}
	g.MustRun(t, strings.Join(append(script, "rm -rf /root/ua-rpm"), "\n"))
	if got, want := strings.TrimSpace(g.MustRun(t, "update-agent version")), "update-agent "+p.Version; got != want {
		t.Fatalf("installed update-agent prints %q, want %q", got, want)
	}
}

// WriteFiles writes the payload as payload.tar (owned by root, links kept)
// and %post as post.sh into dir, for a guest that installs them its own way:
// an ostree guest, whose /usr is read-only, bakes the payload into a commit
// and runs %post (with PostProg) once booted in it.
func (p *Package) WriteFiles(dir string) error {
	for name, b := range map[string][]byte{"payload.tar": p.payload, "post.sh": []byte(p.postIn)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// PostProg is %post's interpreter; "" when the package has no %post.
func (p *Package) PostProg() string {
	if p.postIn == "" {
		return ""
	}
	return p.postProg
}

// Run runs argv in dir and returns its stdout; the error carries the tail of
// stdout and stderr. Under `make test` or `make e2e` the outer make's flags
// would leak into an inner make: they are dropped.
func Run(dir, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, lastLines(stdout.String(), 30), stderr.String())
	}
	return stdout.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

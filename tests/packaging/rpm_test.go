// Package packaging tests the RPM that `make rpm` builds: its file list, the
// payload against the repository's files, the binary's build flags and the
// systemd scriptlets. It needs rpmbuild (Debian's rpm package; .ci/run
// installs it) and skips without it.
package packaging

import (
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/update-agent/update-agent/tests/e2e/rpmpkg"
)

// built is one `make rpm-payload` shared by the tests: rpmbuild is the slow part.
type built struct {
	root    string // repository root
	rpm     string // the binary RPM
	srpm    string
	tarball string
	payload string // the RPM's files unpacked
	version string // the package VERSION tag
	err     error
}

var (
	buildOnce sync.Once
	build     built
)

func TestMain(m *testing.M) {
	code := m.Run()
	if build.payload != "" {
		os.RemoveAll(filepath.Dir(build.payload))
	}
	os.Exit(code)
}

func mustRun(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	out, err := rpmpkg.Run(dir, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// getBuild builds the packages once (without %check: `make rpm` runs it, and
// the unit tests run in this same `go test` anyway).
func getBuild(t *testing.T) *built {
	t.Helper()
	if _, err := exec.LookPath("rpmbuild"); err != nil {
		t.Skip("rpmbuild not found: install Debian's rpm package (.ci/run does)")
	}
	buildOnce.Do(func() {
		b := &build
		root, err := filepath.Abs("../..")
		if err != nil {
			b.err = err
			return
		}
		b.root = root
		tmp, err := os.MkdirTemp("", "update-agent-rpm-test-")
		if err != nil {
			b.err = err
			return
		}
		distdir := filepath.Join(tmp, "dist")
		b.payload = filepath.Join(tmp, "payload")
		if _, b.err = rpmpkg.Run(root, "make", "--no-print-directory", "rpm-payload",
			"DISTDIR="+distdir, "PAYLOAD_DIR="+b.payload, "RPMBUILD_OPTS=--nocheck"); b.err != nil {
			return
		}
		for _, pattern := range []string{"*.src.rpm", "update-agent-[0-9]*." + rpmArch() + ".rpm", "*.tar.gz"} {
			m, _ := filepath.Glob(filepath.Join(distdir, pattern))
			if len(m) != 1 {
				b.err = fmt.Errorf("want one %s in %s, found %q", pattern, distdir, m)
				return
			}
			switch pattern {
			case "*.src.rpm":
				b.srpm = m[0]
			case "*.tar.gz":
				b.tarball = m[0]
			default:
				b.rpm = m[0]
			}
		}
		b.version, b.err = rpmpkg.Run(root, "rpm", "-qp", "--qf", "%{VERSION}", b.rpm)
	})
	if build.err != nil {
		t.Fatalf("building the RPM: %v", build.err)
	}
	return &build
}

func rpmArch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	default:
		return runtime.GOARCH
	}
}

// trackedUnder lists the git-tracked files under dir (what `make dist` packs).
func trackedUnder(t *testing.T, root, dir string) []string {
	t.Helper()
	out := mustRun(t, root, "git", "ls-files", "--", dir)
	return strings.Fields(out)
}

const (
	docdir  = "/usr/share/doc/update-agent"
	manPage = "/usr/share/man/man8/update-agent.8"
)

// installed maps each packaged regular file to its source in the repository.
func installed(t *testing.T, root string) map[string]string {
	m := map[string]string{
		"/usr/lib/systemd/system/update-agent.service":           "units/update-agent.service",
		"/usr/lib/systemd/system/update-agent-fleetlock.service": "units/update-agent-fleetlock.service",
		"/usr/lib/systemd/system-preset/90-update-agent.preset":  "units/90-update-agent.preset",
		"/usr/lib/tmpfiles.d/update-agent.conf":                  "units/update-agent.tmpfiles.conf",
		"/usr/lib/systemd/catalog/update-agent.catalog":          "units/update-agent.catalog",
		"/usr/lib/update-agent/config.d/00-defaults.toml":        "packaging/config.d/00-defaults.toml",
		// Opt-in, so not under udev's rules.d.
		"/usr/share/update-agent/udev/60-update-agent-bfq.rules": "units/60-update-agent-bfq.rules",
		docdir + "/README.md": "README.md",
		// Fedora's rpmbuild gzips it (brp-compress), Debian's does not:
		// either name, compared unzipped.
		manPage: "packaging/update-agent.8",
		// docs/design.md names it; the package ships it beside docs/.
		docdir + "/FLOW.md":                        "agent/engine/FLOW.md",
		"/usr/share/licenses/update-agent/LICENSE": "packaging/LICENSE",
	}
	docs := trackedUnder(t, root, "docs")
	if len(docs) == 0 {
		t.Fatal("no files under docs")
	}
	for _, f := range docs {
		m[docdir+"/"+f] = f
	}
	examples := trackedUnder(t, root, "packaging/examples")
	if len(examples) == 0 {
		t.Fatal("no files under packaging/examples")
	}
	for _, f := range examples {
		m[docdir+"/examples/"+strings.TrimPrefix(f, "packaging/examples/")] = f
	}
	return m
}

// buildIDLink matches rpm's /usr/lib/.build-id links to the binary, whose
// names depend on the build.
var buildIDLink = regexp.MustCompile(`^/usr/lib/\.build-id(/[0-9a-f]{2}(/[0-9a-f]{38})?)?$`)

func TestFileList(t *testing.T) {
	b := getBuild(t)
	want := map[string]bool{
		"/usr/bin/update-agent":            true,
		"/etc/update-agent":                true,
		"/etc/update-agent/config.d":       true,
		"/usr/lib/update-agent":            true,
		"/usr/lib/update-agent/config.d":   true,
		"/usr/share/update-agent":          true,
		"/usr/share/update-agent/udev":     true,
		docdir:                             true,
		"/usr/share/licenses/update-agent": true,
	}
	for dst := range installed(t, b.root) {
		want[dst] = true
		// Directories below the doc dir come with %doc.
		for d := path.Dir(dst); strings.HasPrefix(d, docdir+"/"); d = path.Dir(d) {
			want[d] = true
		}
	}
	var got, unexpected []string
	for _, f := range strings.Split(strings.TrimSpace(mustRun(t, b.root, "rpm", "-qlp", b.rpm)), "\n") {
		got = append(got, f)
		if f == manPage+".gz" {
			f = manPage
		}
		switch {
		case want[f]:
			delete(want, f)
		case buildIDLink.MatchString(f):
		default:
			unexpected = append(unexpected, f)
		}
	}
	var missing []string
	for f := range want {
		missing = append(missing, f)
	}
	sort.Strings(missing)
	if len(missing) > 0 || len(unexpected) > 0 {
		t.Errorf("rpm -qlp: missing %q, unexpected %q; full list:\n%s", missing, unexpected, strings.Join(got, "\n"))
	}
}

func TestFileAttributes(t *testing.T) {
	b := getBuild(t)
	out := mustRun(t, b.root, "rpm", "-qp", "--qf", `[%{FILENAMES} %{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME}\n]`, b.rpm)
	modes := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("unexpected line %q", line)
		}
		if f[2] != "root:root" {
			t.Errorf("%s owned by %s, want root:root", f[0], f[2])
		}
		modes[f[0]] = f[1]
	}
	for file, want := range map[string]string{
		"/usr/bin/update-agent":                                  "-rwxr-xr-x",
		"/usr/lib/systemd/system/update-agent.service":           "-rw-r--r--",
		"/usr/lib/systemd/system/update-agent-fleetlock.service": "-rw-r--r--",
		"/usr/lib/systemd/catalog/update-agent.catalog":          "-rw-r--r--",
		"/etc/update-agent/config.d":                             "drwxr-xr-x",
		"/usr/lib/update-agent/config.d/00-defaults.toml":        "-rw-r--r--",
		"/usr/share/update-agent/udev/60-update-agent-bfq.rules": "-rw-r--r--",
	} {
		if modes[file] != want {
			t.Errorf("%s: mode %q, want %q", file, modes[file], want)
		}
	}
}

// TestPayload checks that what the package installs is the repository's files
// and a binary built the way the spec says.
func TestPayload(t *testing.T) {
	b := getBuild(t)
	for dst, src := range installed(t, b.root) {
		want, err := os.ReadFile(filepath.Join(b.root, src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b.payload, dst))
		if dst == manPage && errors.Is(err, fs.ErrNotExist) {
			if got, err = os.ReadFile(filepath.Join(b.payload, dst+".gz")); err == nil {
				got, err = gunzip(got)
			}
		}
		if err != nil {
			t.Errorf("payload: %v", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("payload %s differs from %s", dst, src)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(b.payload, "etc/update-agent/config.d")); err != nil || len(entries) != 0 {
		t.Errorf("/etc/update-agent/config.d should exist and be empty: %v, %d entries", err, len(entries))
	}

	bin := filepath.Join(b.payload, "usr/bin/update-agent")
	if out := mustRun(t, b.root, bin, "version"); strings.TrimSpace(out) != "update-agent "+b.version {
		t.Errorf("update-agent version printed %q, want the package version %q", out, b.version)
	}
	// The spec's Version, or a snapshot of it (HEAD may move while we build).
	spec, err := os.ReadFile(filepath.Join(b.root, "update-agent.spec"))
	if err != nil {
		t.Fatal(err)
	}
	base := regexp.MustCompile(`(?m)^Version:\s+(\S+)$`).FindSubmatch(spec)
	if base == nil {
		t.Fatal("no Version: in update-agent.spec")
	}
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(string(base[1])) + `(~[0-9]+\.g[0-9a-f]{7,})?$`).MatchString(b.version) {
		t.Errorf("package version %q is neither %s nor a snapshot of it", b.version, base[1])
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" {
		t.Errorf("binary not built with -trimpath: %v", info.Settings)
	}
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		if settings["-buildmode"] != "pie" {
			t.Errorf("binary not built with -buildmode=pie: %v", info.Settings)
		}
	}
	if _, ok := settings["vcs.revision"]; ok {
		t.Errorf("binary stamped with VCS data of the build directory: %v", info.Settings)
	}
}

// TestSources checks that the source package is self-contained: the tarball
// carries vendored modules and the spec at the packaged version, and the
// repository does not carry vendor/.
func TestSources(t *testing.T) {
	b := getBuild(t)
	srpmFiles := strings.Fields(mustRun(t, b.root, "rpm", "-qlp", b.srpm))
	sort.Strings(srpmFiles)
	if want := []string{filepath.Base(b.tarball), "update-agent.spec"}; strings.Join(srpmFiles, " ") != strings.Join(want, " ") {
		t.Errorf("SRPM holds %q, want %q", srpmFiles, want)
	}
	top := "update-agent-" + b.version + "/"
	list := mustRun(t, b.root, "tar", "-tzf", b.tarball)
	for _, f := range []string{top + "vendor/modules.txt", top + "go.mod", top + "update-agent.spec", top + "cmd/update-agent/main.go"} {
		if !strings.Contains("\n"+list, "\n"+f+"\n") {
			t.Errorf("tarball lacks %s", f)
		}
	}
	spec := mustRun(t, b.root, "tar", "-xzOf", b.tarball, top+"update-agent.spec")
	if !regexp.MustCompile(`(?m)^Version:\s+` + regexp.QuoteMeta(b.version) + `$`).MatchString(spec) {
		t.Errorf("tarball's spec does not carry Version %s", b.version)
	}
	if tracked := trackedUnder(t, b.root, "vendor"); len(tracked) > 0 {
		t.Errorf("the repository carries vendor/: %q", tracked)
	}
}

// TestVersionOverride checks RPM_VERSION (what the guest e2e stamps each of
// its builds with) becomes the package version, and that one rpm would not
// accept as a Version tag is refused before anything is built.
func TestVersionOverride(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	version := func(override string) (string, error) {
		cmd := exec.Command("packaging/rpm.sh", "version")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "RPM_VERSION="+override)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if got, err := version("0.1.0~5.gabcdef0.e2e1"); err != nil || got != "0.1.0~5.gabcdef0.e2e1" {
		t.Errorf("RPM_VERSION=0.1.0~5.gabcdef0.e2e1: version %q, %v", got, err)
	}
	for _, bad := range []string{"0.1.0-1", "0.1 0", "~0.1"} {
		if got, err := version(bad); err == nil || !strings.Contains(got, "not an rpm version") {
			t.Errorf("RPM_VERSION=%q: version %q, %v; want refused", bad, got, err)
		}
	}
	// Unset (empty, as make passes it), it is the spec's Version or a snapshot of it.
	spec, err := os.ReadFile(filepath.Join(root, "update-agent.spec"))
	if err != nil {
		t.Fatal(err)
	}
	base := regexp.MustCompile(`(?m)^Version:\s+(\S+)$`).FindSubmatch(spec)
	if base == nil {
		t.Fatal("no Version: in update-agent.spec")
	}
	snapshot := regexp.MustCompile(`^` + regexp.QuoteMeta(string(base[1])) + `(~[0-9]+\.g[0-9a-f]{7,})?$`)
	if got, err := version(""); err != nil || !snapshot.MatchString(got) {
		t.Errorf("RPM_VERSION empty: version %q, %v; want %s or a snapshot of it", got, err, base[1])
	}
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

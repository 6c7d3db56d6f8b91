package standin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Paths of the booted ostree sysroot (libostree's run state).
const (
	sysrootRepo   = "/ostree/repo"
	stagedLocked  = "/run/ostree/staged-deployment-locked"
	stagedRunFile = "/run/ostree/staged-deployment"
)

// sysrootStore is the booted ostree sysroot: staging is `ostree admin
// deploy --stage`, the lock is libostree's own lock file (what rpm-ostree's
// --lock-finalization writes), and ostree-finalize-staged.service finalizes
// at shutdown. What is booted is what ostree says booted.
type sysrootStore struct {
	ostree  ostreeCLI
	lockDir string // "/run/ostree" unless a test moves it
	root    string // "/" unless a test moves it: where ostree/deploy is
}

func newSysrootStore(ot ostreeCLI) *sysrootStore { return &sysrootStore{ostree: ot} }

func (s *sysrootStore) repo() string { return sysrootRepo }

// adminDep is one line group of `ostree admin status`.
type adminDep struct {
	osname, csum, origin, version string
	serial                        int
	booted, staged, rollback      bool
}

// adminDepLine is a deployment's first line: "* " marks the booted one,
// others are indented; the indent may be gone from the first line (the
// CLI runner trims output, and a staged deployment always comes first).
var adminDepLine = regexp.MustCompile(`^(\* |\s*)(\S+) ([0-9a-f]{64})\.(\d+)(?: \((\w+)\))?$`)

// parseAdminStatus reads `ostree admin status` (libostree 2022.7 layout).
func parseAdminStatus(out string) ([]adminDep, error) {
	var deps []adminDep
	for _, line := range strings.Split(out, "\n") {
		if m := adminDepLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[4])
			deps = append(deps, adminDep{osname: m[2], csum: m[3], serial: n, booted: m[1] == "* ",
				staged: m[5] == "staged", rollback: m[5] == "rollback"})
			continue
		}
		if len(deps) == 0 {
			continue
		}
		d := &deps[len(deps)-1]
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		switch {
		case !ok:
		case k == "origin refspec":
			d.origin = v
		case k == "Version":
			d.version = v
		}
	}
	for _, d := range deps {
		if d.booted {
			return deps, nil
		}
	}
	return nil, fmt.Errorf("ostree admin status shows no booted deployment:\n%s", out)
}

func (s *sysrootStore) status(ctx context.Context) ([]adminDep, error) {
	out, err := s.ostree.run(ctx, "reading the sysroot", "admin", "status")
	if err != nil {
		return nil, err
	}
	return parseAdminStatus(out)
}

func (s *sysrootStore) dep(ctx context.Context, a adminDep) (Dep, error) {
	v, ts, err := s.ostree.commitInfo(ctx, sysrootRepo, a.csum)
	if err != nil {
		return Dep{}, err
	}
	if v == "" {
		v = a.version
	}
	d := Dep{OSName: a.osname, Checksum: a.csum, Serial: a.serial, Origin: a.origin, Version: v, Timestamp: ts}
	if a.origin != "" {
		return d, nil
	}
	// ostree admin status prints "origin: <unknown origin type>" for an
	// origin without a refspec (ostreedev/ostree
	// src/ostree/ot-admin-builtin-status.c): a container image's is read
	// from the deployment's origin file, which staging writes too
	// (src/libostree/ostree-sysroot-deploy.c, stage_tree_with_options).
	b, err := os.ReadFile(s.originPath(a))
	if errors.Is(err, fs.ErrNotExist) {
		return d, nil // "origin: none"
	}
	if err != nil {
		return d, fmt.Errorf("reading the origin of %s: %w", d.ID(), err)
	}
	if img := originImage(string(b)); img != "" {
		backing, _, err := imageBacking(img)
		if err != nil {
			return d, fmt.Errorf("the origin of %s: %w", d.ID(), err)
		}
		d.Origin, d.Image = backing, img
	}
	return d, nil
}

// originPath is a deployment's origin file (ostreedev/ostree
// src/libostree/ostree-sysroot.c, ostree_sysroot_get_deployment_origin_path).
func (s *sysrootStore) originPath(a adminDep) string {
	root := s.root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, "ostree", "deploy", a.osname, "deploy", fmt.Sprintf("%s.%d.origin", a.csum, a.serial))
}

// originFile is the origin rpm-ostree writes: [origin] refspec= for an
// ostree ref, container-image-reference= for an image, never both
// (coreos/rpm-ostree rust/src/origin.rs, origin_to_treefile_inner).
func originFile(d Dep) string {
	if d.Image != "" {
		return "[origin]\ncontainer-image-reference=" + d.Image + "\n"
	}
	return "[origin]\nrefspec=" + d.Origin + "\n"
}

// originImage returns the container-image-reference of an origin file's
// [origin] group, "" for none.
func originImage(kf string) string {
	group := ""
	for _, l := range strings.Split(kf, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			group = l[1 : len(l)-1]
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && group == "origin" && strings.TrimSpace(k) == "container-image-reference" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (s *sysrootStore) lockFile() string {
	if s.lockDir != "" {
		return filepath.Join(s.lockDir, filepath.Base(stagedLocked))
	}
	return stagedLocked
}

func (s *sysrootStore) load(ctx context.Context) (Deployments, *Staged, error) {
	all, err := s.status(ctx)
	if err != nil {
		return Deployments{}, nil, err
	}
	var deps Deployments
	var staged *Staged
	seenBooted := false
	for _, a := range all {
		d, err := s.dep(ctx, a)
		if err != nil {
			return deps, nil, err
		}
		switch {
		case a.booted:
			deps.Booted, seenBooted = d, true
		case a.staged:
			// The legacy lock file alone, as upstream's status
			// "finalization-locked" reads it (status.go).
			_, err := os.Stat(s.lockFile())
			staged = &Staged{Deployment: d, Locked: err == nil}
		case seenBooted && deps.Rollback == nil:
			deps.Rollback = &d
		}
	}
	return deps, staged, nil
}

// stage deploys nd.Checksum with nd.Origin as its origin. The lock file is
// written before staging, as rpm-ostree did before 2024.6, so no shutdown
// can finalize a deployment that was asked to be locked; staging unlocked
// leaves an existing lock file alone, as upstream did.
func (s *sysrootStore) stage(ctx context.Context, nd Dep, _ Deployments, _ *Staged, locked bool) (Dep, error) {
	if locked {
		if err := os.MkdirAll(filepath.Dir(s.lockFile()), 0o755); err != nil {
			return nd, err
		}
		if err := os.WriteFile(s.lockFile(), nil, 0o640); err != nil {
			return nd, fmt.Errorf("touch(%s): %w", s.lockFile(), err)
		}
	}
	origin, err := os.CreateTemp("", "standin-origin-")
	if err != nil {
		return nd, err
	}
	defer os.Remove(origin.Name())
	if _, err := origin.WriteString(originFile(nd)); err != nil {
		origin.Close()
		return nd, err
	}
	if err := origin.Close(); err != nil {
		return nd, err
	}
	if _, err := s.ostree.run(ctx, "staging "+nd.Checksum, "admin", "deploy", "--stage",
		"--os="+nd.OSName, "--origin-file="+origin.Name(), nd.Checksum); err != nil {
		return nd, err
	}
	_, staged, err := s.load(ctx)
	if err != nil {
		return nd, err
	}
	if staged == nil || staged.Deployment.Checksum != nd.Checksum {
		return nd, fmt.Errorf("ostree admin deploy --stage %s: no such staged deployment afterwards", nd.Checksum)
	}
	return staged.Deployment, nil
}

func (s *sysrootStore) unlock(context.Context, Staged) error {
	if err := os.Remove(s.lockFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unlink(%s): %w", s.lockFile(), err)
	}
	return nil
}

func (s *sysrootStore) lock(context.Context, Staged) error {
	if err := os.MkdirAll(filepath.Dir(s.lockFile()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(s.lockFile(), nil, 0o640)
}

// dropStaged forgets the staged deployment as a reboot without
// finalization would (its run state goes) and lets ostree delete it.
func (s *sysrootStore) dropStaged(ctx context.Context, _ Staged) error {
	for _, p := range []string{stagedRunFile, s.lockFile()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	_, err := s.ostree.run(ctx, "removing the staged deployment", "admin", "cleanup")
	return err
}

func (s *sysrootStore) dropRollback(ctx context.Context, deps Deployments) error {
	all, err := s.status(ctx)
	if err != nil {
		return err
	}
	for i, a := range all {
		if a.csum == deps.Rollback.Checksum && a.serial == deps.Rollback.Serial && !a.booted && !a.staged {
			_, err := s.ostree.run(ctx, "removing the rollback deployment", "admin", "undeploy", strconv.Itoa(i))
			return err
		}
	}
	return nil
}

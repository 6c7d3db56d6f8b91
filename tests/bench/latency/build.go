package latency

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EtcdVersion is the etcd server the benchmark runs in the guest: the same
// release as the client and embedded server in go.mod.
const EtcdVersion = "v3.7.3"

// Binaries are the host-built programs copied into the guest.
type Binaries struct {
	Dir string // all of them, by name: rpm-ostree, mkupdate, putload, update-agent, etcd
}

// Path returns the host path of the named binary.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// Build builds the stand-in, mkupdate, putload and update-agent from the
// module at repo, and the etcd server, into dir. Static binaries: the guest
// is Debian bookworm, the host may not be.
func Build(ctx context.Context, repo, dir string) (Binaries, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	for name, pkg := range map[string]string{
		"rpm-ostree":   "./tests/rpmostree/cmd/rpm-ostree",
		"mkupdate":     "./tests/mkupdate",
		"putload":      "./tests/bench/cmd/putload",
		"update-agent": "./cmd/update-agent",
	} {
		if err := goCmd(ctx, repo, "build", "-trimpath", "-o", filepath.Join(dir, name), pkg); err != nil {
			return Binaries{}, fmt.Errorf("building %s: %w", name, err)
		}
	}
	if err := buildEtcd(ctx, filepath.Join(dir, "etcd")); err != nil {
		return Binaries{}, err
	}
	return Binaries{Dir: dir}, nil
}

// buildEtcd builds etcd's own server main (go.etcd.io/etcd/server/v3) in a
// scratch module: its command-line dependencies (cobra) are not ours, so
// they stay out of go.mod. The result is cached per version.
func buildEtcd(ctx context.Context, out string) error {
	cache, err := os.UserCacheDir()
	if err != nil {
		return err
	}
	cached := filepath.Join(cache, "update-agent-bench", "etcd-"+EtcdVersion)
	if _, err := os.Stat(cached); err != nil {
		mod, err := os.MkdirTemp("", "etcd-build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(mod)
		if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module etcdbuild\n\ngo 1.26\n"), 0o644); err != nil {
			return err
		}
		if err := goCmd(ctx, mod, "get", "go.etcd.io/etcd/server/v3@"+EtcdVersion); err != nil {
			return fmt.Errorf("fetching etcd %s: %w", EtcdVersion, err)
		}
		if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
			return err
		}
		if err := goCmd(ctx, mod, "build", "-trimpath", "-o", cached, "go.etcd.io/etcd/server/v3"); err != nil {
			return fmt.Errorf("building etcd %s: %w", EtcdVersion, err)
		}
	}
	return copyFile(cached, out)
}

func goCmd(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if strings.HasPrefix(dir, os.TempDir()) {
		// The scratch module for etcd resolves its own requirements.
		cmd.Env = append(cmd.Env, "GOFLAGS=-mod=mod", "GOWORK=off")
	}
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

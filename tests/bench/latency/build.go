package latency

import (
	"context"
	"fmt"
	"github.com/update-agent/update-agent/tests/e2e/guestbin"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EtcdVersion is the etcd server the benchmark runs in the guest: the one
// the e2e tests run (guestbin), the release go.mod pins.
const EtcdVersion = guestbin.EtcdVersion

// Binaries are the host-built programs copied into the guest.
type Binaries struct {
	Dir string // all of them, by name: rpm-ostree, mkupdate, putload, kstacks, update-agent, etcd
}

// Path returns the host path of the named binary.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// programs are the binaries Build makes from the module, by name: the
// package of each, relative to the module root.
var programs = map[string]string{
	"rpm-ostree":   "./tests/rpmostree/cmd/rpm-ostree",
	"mkupdate":     "./tests/mkupdate",
	"putload":      "./tests/bench/cmd/putload",
	"kstacks":      "./tests/bench/cmd/kstacks",
	"update-agent": "./cmd/update-agent",
}

// Build builds the stand-in, mkupdate, putload, kstacks and update-agent
// from the module at repo, and the etcd server, into dir. Static binaries:
// the guest is Debian bookworm, the host may not be.
func Build(ctx context.Context, repo, dir string) (Binaries, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	for name, pkg := range programs {
		if err := goCmd(ctx, repo, "build", "-trimpath", "-o", filepath.Join(dir, name), pkg); err != nil {
			return Binaries{}, fmt.Errorf("building %s: %w", name, err)
		}
	}
	if err := guestbin.BuildEtcd(ctx, filepath.Join(dir, "etcd")); err != nil {
		return Binaries{}, err
	}
	return Binaries{Dir: dir}, nil
}

func goCmd(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

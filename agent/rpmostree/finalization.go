package rpmostree

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"github.com/update-agent/update-agent/agent/oplog"
)

// LegacyLockFile is libostree's first finalization lock: while it exists,
// ostree-finalize-staged leaves the staged deployment alone. libostree
// 2023.8 and later keep the lock in /run/ostree/staged-deployment instead
// (its "locked" key) and still honour this file (ostreedev/ostree,
// src/libostree/ostree-sysroot-deploy.c, _ostree_sysroot_finalize_impl_staged_deployment).
const LegacyLockFile = "/run/ostree/staged-deployment-locked"

// FinalizationLock reads whether libostree will finalize the staged
// deployment at the next shutdown. rpm-ostree's `status --json` cannot
// tell: its "finalization-locked" looks at LegacyLockFile only
// (coreos/rpm-ostree, rust/src/daemon.rs), which locked staging no longer
// writes. So: the legacy file, else `ostree admin status`, which prints
// "(finalization locked)" for a deployment locked either way since
// libostree 2023.8 (src/ostree/ot-admin-builtin-status.c).
type FinalizationLock struct {
	// Ostree is the ostree binary; "ostree" (from PATH) when empty.
	Ostree string
	Runner oplog.Runner
	// LegacyFile is LegacyLockFile unless a test moves it.
	LegacyFile string
}

// Locked reports whether the staged deployment with this commit checksum
// (Deployment.Checksum, not its base) is locked for finalization.
func (l FinalizationLock) Locked(ctx context.Context, checksum string) (bool, error) {
	legacy := l.LegacyFile
	if legacy == "" {
		legacy = LegacyLockFile
	}
	if _, err := os.Stat(legacy); err == nil {
		return true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("reading the finalization lock: %w", err)
	}
	bin := l.Ostree
	if bin == "" {
		bin = "ostree"
	}
	r := l.Runner
	r.Quiet = true // read every minute while an update waits staged
	res, err := r.Run(ctx, "reading the staged deployment's finalization lock", bin, "admin", "status")
	if err != nil {
		return false, err
	}
	return StagedLockedInAdminStatus(string(res.Stdout), checksum)
}

// adminStatusLine is a deployment's first line in `ostree admin status`:
// "* " marks the booted one; then stateroot, checksum.serial and the
// markers, e.g. "  fedora-coreos 1f2e....0 (finalization locked)".
var adminStatusLine = regexp.MustCompile(`^[* ]?\s*\S+ ([0-9a-f]{64})\.\d+((?: \([^)]*\))*)\s*$`)

// StagedLockedInAdminStatus reads the lock of the staged deployment with
// this checksum from `ostree admin status` (libostree prints
// "(finalization locked)" in place of "(staged)" for a locked one). A
// deployment not shown as staged is an error: the caller cannot tell.
func StagedLockedInAdminStatus(out, checksum string) (bool, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := adminStatusLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != checksum {
			continue
		}
		switch {
		case strings.Contains(m[2], "(finalization locked)"):
			return true, nil
		case strings.Contains(m[2], "(staged)"):
			return false, nil
		}
		return false, fmt.Errorf("ostree admin status shows %s, but not as staged: %q", checksum, sc.Text())
	}
	return false, fmt.Errorf("ostree admin status does not show staged deployment %s", checksum)
}

package rpmostree

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	stagedCsum = "5cd6d3dbb1e1ba9fd4bb9faf33e1432f0aef3fa8b1ea2d8e0d5bbb5a8c0cf5e1"
	bootedCsum = "0f4bd4e9e8c5e3b4b9e1c2ba3b97d2e8e5d8c2f5b7e9a1c3d5e7f9a1b3c5d7e9"
)

// adminStatus renders `ostree admin status` as libostree prints it
// (ostreedev/ostree, src/ostree/ot-admin-builtin-status.c,
// deployment_print_status: "%c %s %s.%d%s\n" with the marker " (staged)",
// or " (finalization locked)" since 2023.8, then "    Version: ..." and
// "    origin refspec: ...").
func adminStatus(marker string) string {
	return "  fedora-coreos " + stagedCsum + ".1" + marker + "\n" +
		"    Version: 43.20261201.3.0\n" +
		"    origin refspec: fedora:fedora/x86_64/coreos/stable\n" +
		"* fedora-coreos " + bootedCsum + ".0\n" +
		"    Version: 43.20261115.3.0\n" +
		"    origin refspec: fedora:fedora/x86_64/coreos/stable\n"
}

func TestStagedLockedInAdminStatus(t *testing.T) {
	for _, c := range []struct {
		name, out, csum string
		locked, err     bool
	}{
		{name: "locked (libostree >= 2023.8)", out: adminStatus(" (finalization locked)"), csum: stagedCsum, locked: true},
		{name: "unlocked", out: adminStatus(" (staged)"), csum: stagedCsum},
		// The CLI runner may trim the first line's indent.
		{name: "trimmed indent", out: strings.TrimLeft(adminStatus(" (finalization locked)"), " "), csum: stagedCsum, locked: true},
		{name: "with the soft-reboot marker", out: adminStatus(" (finalization locked) (soft-reboot)"), csum: stagedCsum, locked: true},
		{name: "not staged: cannot tell", out: adminStatus(" (staged)"), csum: bootedCsum, err: true},
		{name: "absent: cannot tell", out: adminStatus(" (staged)"), csum: strings.Repeat("a", 64), err: true},
		{name: "empty", out: "", csum: stagedCsum, err: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := StagedLockedInAdminStatus(c.out, c.csum)
			if (err != nil) != c.err || got != c.locked {
				t.Errorf("got %v, %v; want locked %v, error %v", got, err, c.locked, c.err)
			}
		})
	}
}

// TestFinalizationLockLegacyFile: the legacy lock file says locked without
// asking ostree; without it, ostree's answer (here a script that prints the
// unlocked status) decides.
func TestFinalizationLockLegacyFile(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, "staged-deployment-locked")
	ostree := filepath.Join(dir, "ostree")
	if err := os.WriteFile(filepath.Join(dir, "status.txt"), []byte(adminStatus(" (staged)")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ostree, []byte("#!/bin/sh\nexec cat "+filepath.Join(dir, "status.txt")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := FinalizationLock{Ostree: ostree, LegacyFile: legacy}
	if locked, err := l.Locked(context.Background(), stagedCsum); err != nil || locked {
		t.Fatalf("no legacy file, ostree says staged: got %v, %v; want unlocked", locked, err)
	}
	if err := os.WriteFile(legacy, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if locked, err := l.Locked(context.Background(), stagedCsum); err != nil || !locked {
		t.Fatalf("legacy lock file present: got %v, %v; want locked", locked, err)
	}
}

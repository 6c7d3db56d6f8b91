//go:build e2e_ostree

package ostree

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
)

const bootcBin = binDir + "/bootc"

// installBootc adds the bootc stand-in beside the rpm-ostree one (same
// sysroot, real-sysroot mode in this guest).
func installBootc(t *testing.T, g *guest.Guest) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "bootc")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	modroot.Build(ctx, t, filepath.Join(dir, "bootc"), "./tests/rpmostree/cmd/bootc")
	g.MustRun(t, "rm -rf /root/bootc")
	if err := g.CopyIn(ctx, dir, "/root/bootc"); err != nil {
		t.Fatal(err)
	}
	g.MustRun(t, "install -D -m0755 /root/bootc/bootc "+bootcBin)
}

func bootcStatus(t *testing.T, g *guest.Guest) *bootc.Host {
	t.Helper()
	h, err := bootc.ParseStatus([]byte(g.MustRun(t, bootcBin+" status --format=json")))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestBootcDownloadOnlySurvivesUnplannedReboot: `bootc upgrade
// --download-only` stages on the booted sysroot, locked; an unplanned
// reboot boots the old deployment and drops the staged one unapplied;
// `bootc upgrade --from-downloaded --apply` unlocks it and reboots into it.
func TestBootcDownloadOnlySurvivesUnplannedReboot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	g := ostreeGuest(t)
	installStandin(t, g)
	installBootc(t, g)
	base := bootedCommit(t, g)
	g.MustRun(t, rpmOT+" standin-init --osname=debian --remote=fedora --url=file://"+updates+" os/stable")
	h := bootcStatus(t, g)
	if !h.Managed() || h.Status.Booted.Ostree.Checksum != base || h.Status.Staged != nil {
		t.Fatalf("bootc status before: %+v", h.Status)
	}
	bootedDigest := h.Status.Booted.Digest()

	next := publish(t, g, base, 1)
	g.MustRun(t, bootcBin+" upgrade --download-only")
	s := bootcStatus(t, g).Status.Staged
	if s == nil || s.Ostree.Checksum != next || !s.DownloadOnly {
		t.Fatalf("staged per bootc: %+v, want %s download-only", s, next)
	}
	nextDigest := s.Digest()
	if out := g.MustRun(t, "ostree admin status; ls /run/ostree"); !strings.Contains(out, next+".0 (staged)") || !strings.Contains(out, "staged-deployment-locked") {
		t.Fatalf("ostree has no locked staged deployment:\n%s", out)
	}

	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, base)
	h = bootcStatus(t, g)
	if h.Status.Booted.Digest() != bootedDigest || h.Status.Staged != nil {
		t.Fatalf("after an unplanned reboot: booted %s staged %+v, want %s and nothing staged", h.Status.Booted.Digest(), h.Status.Staged, bootedDigest)
	}

	g.MustRun(t, bootcBin+" upgrade --download-only")
	if s := bootcStatus(t, g).Status.Staged; s == nil || s.Digest() != nextDigest || !s.DownloadOnly {
		t.Fatalf("staged again: %+v", s)
	}
	if err := g.RebootWith(ctx, bootcBin+" upgrade --from-downloaded --apply"); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, next)
	if h := bootcStatus(t, g); h.Status.Booted.Digest() != nextDigest || h.Status.Rollback.Digest() != bootedDigest {
		t.Fatalf("after --apply: booted %s rollback %s", h.Status.Booted.Digest(), h.Status.Rollback.Digest())
	}
	if gen := strings.TrimSpace(g.MustRun(t, "cat /usr/share/ua-generation")); gen != "1" {
		t.Errorf("booted tree has generation %q, want 1", gen)
	}
}

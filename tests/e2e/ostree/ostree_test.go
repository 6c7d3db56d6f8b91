//go:build e2e_ostree

package ostree

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestOstreeGuestBoots: the guest booted an ostree deployment: ostree= on
// the command line names the deployment ostree reports booted, /usr is
// read-only, /boot is its own disk (what the launcher reads between boots)
// and ostree's shutdown finalization is armed. Staging, the lock and the
// reboots that follow boot entries are TestStandinStagesRealDeployments.
func TestOstreeGuestBoots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	g := ostreeGuest(t)
	g.MustRun(t, "test -e /run/ostree-booted && test -d /sysroot/ostree/repo")
	if _, _, code, _ := g.Run(ctx, "touch /usr/ua-write-test"); code == 0 {
		t.Error("/usr is writable: not an ostree deployment")
	}
	c, s := booted(t, g)
	if c != s {
		t.Errorf("ostree= on the command line is %s, ostree admin status says %s", c, s)
	}
	if src := strings.TrimSpace(g.MustRun(t, "findmnt -no SOURCE /boot")); src != "/dev/vdc" {
		t.Errorf("/boot is on %q, want /dev/vdc", src)
	}
	if out := g.MustRun(t, "systemctl is-enabled ostree-finalize-staged.path"); strings.TrimSpace(out) != "enabled" {
		t.Errorf("ostree-finalize-staged.path is %q", out)
	}
}

// TestOstreeGuestFollowsFinalization: a staged deployment with ostree's
// finalization lock is not applied by a reboot; without the lock the
// shutdown finalizes it and the next boot is in it, the old one kept as
// rollback.
func TestOstreeGuestFollowsFinalization(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	g := ostreeGuest(t)

	g.MustRun(t, "test -e /run/ostree-booted && test -d /sysroot/ostree/repo")
	if _, _, code, _ := g.Run(ctx, "touch /usr/ua-write-test"); code == 0 {
		t.Error("/usr is writable: not an ostree deployment")
	}
	base, _ := booted(t, g)
	mustBoot(t, g, base)

	// The update: the booted commit plus one file.
	next := strings.TrimSpace(g.MustRun(t, "set -e; rm -rf /var/tmp/ua-payload; mkdir -p /var/tmp/ua-payload/usr/share; "+
		"echo update-1 >/var/tmp/ua-payload/usr/share/ua-update; "+
		"ostree commit --repo=/ostree/repo -b debian/bookworm --tree=ref="+base+" --tree=dir=/var/tmp/ua-payload "+
		"--add-metadata-string=version=update-1 -s update-1"))

	// Staged and locked, then an unplanned reboot: the old deployment boots.
	g.MustRun(t, "ostree admin deploy --stage debian/bookworm && touch /run/ostree/staged-deployment-locked")
	if out := g.MustRun(t, "ostree admin status"); !strings.Contains(out, next) || !strings.Contains(out, "staged") {
		t.Fatalf("not staged:\n%s", out)
	}
	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, base)
	if out := g.MustRun(t, "ostree admin status"); strings.Contains(out, next) {
		t.Fatalf("the locked deployment survived the reboot:\n%s", out)
	}

	// Staged without the lock: the shutdown finalizes it and it boots.
	g.MustRun(t, "ostree admin deploy --stage debian/bookworm")
	if err := g.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	mustBoot(t, g, next)
	if out := g.MustRun(t, "cat /usr/share/ua-update"); strings.TrimSpace(out) != "update-1" {
		t.Errorf("the update's file: %q", out)
	}
	if out := g.MustRun(t, "ostree admin status"); !strings.Contains(out, base) || !strings.Contains(out, "rollback") {
		t.Errorf("the old deployment is not the rollback:\n%s", out)
	}
}

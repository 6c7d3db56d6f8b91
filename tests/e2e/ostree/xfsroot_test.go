//go:build e2e_ostree

package ostree

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/guest"
)

// TestOstreeXFSRoot: the ostree guest with an XFS physical root (the image
// mkfs.xfs -p makes, guest.Options.RootFS) boots its deployment, ostree is
// content with the repo and deployment the protofile made, and the root
// disk, where ostree stages, is throttled like a cloud disk: from Options at
// boot, over QMP at runtime, and the guest's writes feel it. Groundwork for
// the bench's staging on this guest. Runs last in the package (it stops the
// ext4 guest): one image build of its own and one boot.
func TestOstreeXFSRoot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	const bootIOPS, bootBPS = 4000, 200 << 20
	g := ostreeGuestWith(t, guest.Options{Ostree: true, RootFS: "xfs", RootDiskIOPS: bootIOPS, RootDiskBPS: bootBPS})

	if fs := strings.TrimSpace(g.MustRun(t, "findmnt -no FSTYPE /sysroot")); fs != "xfs" {
		t.Errorf("/sysroot is %q, want xfs", fs)
	}
	if cmdline := g.MustRun(t, "cat /proc/cmdline"); !strings.Contains(" "+cmdline, " rootfstype=xfs ") {
		t.Errorf("/proc/cmdline lacks rootfstype=xfs: %s", cmdline)
	}
	// booted fails the test unless /proc/cmdline has ostree= and ostree
	// admin status marks a booted deployment.
	if c, s := booted(t, g); c != s {
		t.Errorf("ostree= on the command line is %s, ostree admin status says %s", c, s)
	}
	// What the protofile carries (setuid) and what the build sets afterwards
	// (the sticky bit of the physical root's /tmp).
	if modes := g.MustRun(t, "stat -c %a /usr/bin/su /sysroot/tmp"); modes != "4755\n1777\n" {
		t.Errorf("modes of /usr/bin/su and /sysroot/tmp: %q, want 4755 and 1777", modes)
	}
	// The repo's objects verify: the base deployment's files are copies of
	// them, not hard links, and nothing else differs.
	g.MustRun(t, "ostree fsck")

	// The root disk's throttle: from Options at boot, then changed at
	// runtime; SetThrottle stays the data disk's.
	if iops, bps, err := g.DiskThrottle(ctx, guest.RootDisk); err != nil || iops != bootIOPS || bps != bootBPS {
		t.Fatalf("root disk at boot: %d IOPS, %d B/s, %v; want %d, %d", iops, bps, err, bootIOPS, bootBPS)
	}
	// 8 MiB of direct writes to the root filesystem, in ms.
	writeMS := func() int {
		t.Helper()
		out := g.MustRun(t, "set -e; s=$(date +%s%N); "+
			"dd if=/dev/zero of=/var/tmp/ua-throttle bs=1M count=8 oflag=direct status=none; "+
			"e=$(date +%s%N); rm -f /var/tmp/ua-throttle; echo $(( (e - s) / 1000000 ))")
		ms, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("dd's time: %q", out)
		}
		return ms
	}
	if src := g.MustRun(t, "findmnt -no SOURCE -T /var/tmp"); !strings.HasPrefix(src, "/dev/vda") {
		t.Fatalf("/var/tmp is on %q, not the root disk", src)
	}
	// Logged only (a load-dependent time): what the bound below is above.
	t.Logf("8 MiB of direct writes to the root fs at %d B/s: %d ms", bootBPS, writeMS())

	const limit = 4 << 20 // B/s
	t.Cleanup(func() {
		_ = g.SetDiskThrottle(context.Background(), guest.RootDisk, 0, 0)
		_ = g.SetThrottle(context.Background(), 0, 0)
	})
	if err := g.SetDiskThrottle(ctx, guest.RootDisk, 0, limit); err != nil {
		t.Fatal(err)
	}
	if err := g.SetThrottle(ctx, 100, 0); err != nil {
		t.Fatal(err)
	}
	if iops, bps, err := g.DiskThrottle(ctx, guest.RootDisk); err != nil || iops != 0 || bps != limit {
		t.Fatalf("root disk: %d IOPS, %d B/s, %v; want 0, %d", iops, bps, err, limit)
	}
	if iops, bps, err := g.Throttle(ctx); err != nil || iops != 100 || bps != 0 {
		t.Fatalf("data disk: %d IOPS, %d B/s, %v; want 100, 0", iops, bps, err)
	}

	// The guest feels it: 8 MiB of direct writes to the root filesystem at
	// 4 MiB/s take 2 s; half of that is the bound (only a throttle that
	// does not act can miss it, however slow the host).
	ms := writeMS()
	t.Logf("8 MiB of direct writes to the root fs at %d B/s: %d ms", limit, ms)
	if ms < 1000 {
		t.Errorf("8 MiB at a %d B/s limit took %d ms, want at least 1000", limit, ms)
	}
}

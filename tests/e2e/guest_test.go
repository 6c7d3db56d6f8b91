//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/guest"
)

// TestGuestHost checks what the agent's tests rely on in the guest:
// systemd with cgroup v2 and the io controller, bfq available on the data
// disk, the data disk mounted as XFS, and the helper's own plumbing.
func TestGuestHost(t *testing.T) {
	g := guest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	if got := strings.TrimSpace(g.MustRun(t, "stat -fc %T /sys/fs/cgroup")); got != "cgroup2fs" {
		t.Errorf("/sys/fs/cgroup is %q, want cgroup2fs (unified hierarchy)", got)
	}
	if ctl := g.MustRun(t, "cat /sys/fs/cgroup/cgroup.controllers"); !strings.Contains(" "+ctl+" ", " io ") {
		t.Errorf("cgroup controllers %q lack io", ctl)
	}
	dev := filepath.Base(guest.DataDevice)
	if sched := g.MustRun(t, "cat /sys/block/"+dev+"/queue/scheduler"); !strings.Contains(sched, "bfq") {
		t.Errorf("bfq not available on %s: %q (modules-load.d/bfq.conf)", dev, sched)
	}
	if fs := strings.TrimSpace(g.MustRun(t, "findmnt -rno FSTYPE,SOURCE "+guest.DataDir)); fs != "xfs "+guest.DataDevice {
		t.Errorf("%s is %q, want xfs on %s", guest.DataDir, fs, guest.DataDevice)
	}
	g.MustRun(t, "command -v ostree fio jq mkfs.xfs systemd-run >/dev/null")

	// Run reports the command's exit code and stderr, not an error.
	_, stderr, code, err := g.Run(ctx, "echo oops >&2; exit 3")
	if err != nil || code != 3 || strings.TrimSpace(stderr) != "oops" {
		t.Errorf("Run(exit 3) = code %d, stderr %q, err %v; want 3, \"oops\", nil", code, stderr, err)
	}

	// CopyIn keeps the mode.
	local := filepath.Join(t.TempDir(), "hello.sh")
	if err := os.WriteFile(local, []byte("#!/bin/sh\necho hello from the host\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := g.CopyIn(ctx, local, "/root/hello.sh"); err != nil {
		t.Fatal(err)
	}
	if out := g.MustRun(t, "stat -c %a /root/hello.sh && /root/hello.sh"); out != "750\nhello from the host\n" {
		t.Errorf("copied script: %q", out)
	}
}

// TestGuestThrottle checks that the data disk's throttling changes live over
// QMP and that the guest feels it: the bench builds on this.
func TestGuestThrottle(t *testing.T) {
	g := guest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if err := g.SetThrottle(context.Background(), 0, 0); err != nil {
			t.Errorf("unthrottling: %v", err)
		}
	})

	// Direct 4 KiB random reads, one at a time: IOPS bound, page cache bypassed.
	fio := "fio --name=t --filename=" + guest.DataDir + "/fio.dat --size=64M --rw=randread --bs=4k " +
		"--direct=1 --ioengine=psync --time_based --runtime=4 --output-format=json | jq .jobs[0].read.iops"
	readIOPS := func() float64 {
		t.Helper()
		v, err := strconv.ParseFloat(strings.TrimSpace(g.MustRun(t, fio)), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	free := readIOPS() // also lays the file out, unthrottled

	const limit = 100
	if err := g.SetThrottle(ctx, limit, 0); err != nil {
		t.Fatal(err)
	}
	iops, bps, err := g.Throttle(ctx)
	if err != nil || iops != limit || bps != 0 {
		t.Fatalf("Throttle() = %d, %d, %v; want %d, 0", iops, bps, err, limit)
	}
	throttled := readIOPS()
	t.Logf("4k random read: %.0f IOPS unthrottled, %.0f IOPS at a %d IOPS limit", free, throttled, limit)
	if throttled > 1.5*limit {
		t.Errorf("throttled to %d IOPS the guest still read %.0f IOPS", limit, throttled)
	}
	if free < 3*limit {
		t.Errorf("unthrottled reads only %.0f IOPS: the throttle check above proves nothing", free)
	}
}

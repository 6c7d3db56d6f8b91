package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOptionsCheck(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		ok   bool
	}{
		{Options{}, true},
		{Options{Ostree: true}, true},
		{Options{Ostree: true, RootFS: "xfs"}, true},
		{Options{RootFS: "xfs"}, false}, // the plain guest's root is ext4
		{Options{Ostree: true, RootFS: "btrfs"}, false},
	} {
		err := tc.opts.withDefaults().check()
		if (err == nil) != tc.ok {
			t.Errorf("Options{Ostree: %v, RootFS: %q}.check() = %v, want ok %v", tc.opts.Ostree, tc.opts.RootFS, err, tc.ok)
		}
	}
	if o := (Options{}).withDefaults(); o.RootFS != "ext4" || o.RootDiskCache != "unsafe" {
		t.Errorf("defaults: RootFS %q, RootDiskCache %q; want ext4, unsafe", o.RootFS, o.RootDiskCache)
	}
}

// TestSetDiskThrottle: each disk's limits go to its own virtio-blk device
// over QMP and are kept for the next boot; SetThrottle stays the data
// disk's.
func TestSetDiskThrottle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		set    func(g *Guest) error
		wantID string
		kept   func(o Options) [2]int64
	}{
		{func(g *Guest) error { return g.SetDiskThrottle(ctx, RootDisk, 500, 20_000_000) }, rootDiskQOM,
			func(o Options) [2]int64 { return [2]int64{o.RootDiskIOPS, o.RootDiskBPS} }},
		{func(g *Guest) error { return g.SetThrottle(ctx, 500, 20_000_000) }, dataDiskQOM,
			func(o Options) [2]int64 { return [2]int64{o.DataDiskIOPS, o.DataDiskBPS} }},
	} {
		sock, got := fakeQMP(t, func(map[string]any) string { return `{"return": {}}` })
		g := &Guest{dir: filepath.Dir(sock)}
		if err := tc.set(g); err != nil {
			t.Fatal(err)
		}
		args, _ := (<-got)["arguments"].(map[string]any)
		if args["id"] != tc.wantID || args["iops"] != float64(500) || args["bps"] != float64(20_000_000) {
			t.Errorf("block_set_io_throttle arguments %v, want id %s", args, tc.wantID)
		}
		if k := tc.kept(g.opts); k != [2]int64{500, 20_000_000} {
			t.Errorf("%s: limits kept for the next boot %v, want [500 20000000]", tc.wantID, k)
		}
	}
}

func TestThrottleOf(t *testing.T) {
	reply := []byte(`[
	  {"device": "", "qdev": "/machine/peripheral/vroot/virtio-backend", "inserted": {"iops": 500, "bps": 20000000}},
	  {"device": "", "qdev": "/machine/peripheral/vdata/virtio-backend", "inserted": {"iops": 0, "bps": 0}},
	  {"device": "", "qdev": "/machine/peripheral/vboot/virtio-backend", "inserted": {"iops": 0, "bps": 0}}]`)
	if iops, bps, err := throttleOf(reply, RootDisk.qdev()); err != nil || iops != 500 || bps != 20_000_000 {
		t.Errorf("root disk: %d, %d, %v; want 500, 20000000", iops, bps, err)
	}
	if iops, bps, err := throttleOf(reply, DataDisk.qdev()); err != nil || iops != 0 || bps != 0 {
		t.Errorf("data disk: %d, %d, %v; want 0, 0", iops, bps, err)
	}
	if _, _, err := throttleOf([]byte(`[]`), RootDisk.qdev()); err == nil {
		t.Error("no device: no error")
	}
}

// protofile runs xfs-protofile.sh on dir: the protofile and the sticky
// list, or the script's error output.
func protofile(t *testing.T, dir string) (proto, sticky string, err error) {
	t.Helper()
	list := filepath.Join(t.TempDir(), "sticky")
	cmd := exec.Command("bash", "xfs-protofile.sh", dir, list)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("xfs-protofile.sh: %w: %s", err, stderr.String())
	}
	b, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), string(b), nil
}

// TestXFSProtofile: the generator's protofile makes an XFS image with the
// tree's names, types, modes (setuid, setgid, and the sticky bit set
// afterwards as build-ostree-image.sh does), owners and contents.
func TestXFSProtofile(t *testing.T) {
	for _, tool := range []string{"mkfs.xfs", "xfs_db"} {
		if _, err := exec.LookPath(tool); err != nil {
			// make test (and so CI) runs host-deps first: there a missing
			// tool is a failure, not a skip.
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not installed under CI (xfsprogs; tests/host-deps.sh installs it)", tool)
			}
			t.Skipf("%s not installed (xfsprogs; tests/host-deps.sh installs it)", tool)
		}
	}
	dir := filepath.Join(t.TempDir(), "tree")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr/lib/deep"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr/lib/deep/f"), []byte("deep\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "usr/su"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(filepath.Join(dir, "usr/su"), os.ModeSetuid|0o755))
	must(os.Link(filepath.Join(dir, "usr/su"), filepath.Join(dir, "su-link")))
	must(os.Symlink("../a:b", filepath.Join(dir, "usr/l")))
	must(os.Mkdir(filepath.Join(dir, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(dir, "tmp"), os.ModeSticky|0o777))
	must(os.Mkdir(filepath.Join(dir, "sg"), 0o755))
	must(os.Chmod(filepath.Join(dir, "sg"), os.ModeSetgid|0o750))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "z"), []byte("after the directories\n"), 0o600))

	proto, sticky, err := protofile(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if sticky != "/tmp 041777\n" {
		t.Errorf("sticky list %q, want \"/tmp 041777\\n\"", sticky)
	}
	img := filepath.Join(t.TempDir(), "x.img")
	f, err := os.Create(img)
	must(err)
	must(f.Truncate(300 << 20)) // mkfs.xfs's smallest
	must(f.Close())
	pf := filepath.Join(t.TempDir(), "proto")
	must(os.WriteFile(pf, []byte(proto), 0o644))
	if out, err := exec.Command("mkfs.xfs", "-q", "-p", pf, img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs -p: %v: %s\nprotofile:\n%s", err, out, proto)
	}
	if out, err := exec.Command("xfs_db", "-x", "-c", "path /tmp", "-c", "write core.mode 041777", img).CombinedOutput(); err != nil {
		t.Fatalf("xfs_db: %v: %s", err, out)
	}
	uid, gid := os.Getuid(), os.Getgid()
	for path, want := range map[string][]string{
		"/usr/lib/deep/f": {"core.mode = 0100644", "core.size = 5"},
		"/usr/su":         {"core.mode = 0104755", "core.size = 10"},
		"/su-link":        {"core.mode = 0104755", "core.nlinkv2 = 1"}, // a copy
		"/usr/l":          {"core.mode = 0120777", `u3.symlink = "../a:b"`},
		"/tmp":            {"core.mode = 041777"},
		"/sg":             {"core.mode = 042750"},
		"/fifo":           {"core.mode = 010600"},
		"/z":              {"core.mode = 0100600", "core.size = 22"},
	} {
		out, err := exec.Command("xfs_db", "-r", "-c", "path "+path, "-c", "print", img).CombinedOutput()
		if err != nil {
			t.Fatalf("xfs_db print %s: %v: %s", path, err, out)
		}
		want = append(want, "core.uid = "+strconv.Itoa(uid), "core.gid = "+strconv.Itoa(gid))
		for _, w := range want {
			if !strings.Contains(string(out), w+"\n") {
				t.Errorf("%s in the image: no %q in\n%s", path, w, out)
			}
		}
	}

	// Names the format cannot carry fail the build, naming them.
	for _, bad := range []struct{ name, target string }{
		{"with space", ""}, {"new\nline", ""}, {":comment", ""}, {"$", ""}, {"link", "a target"},
	} {
		d := filepath.Join(t.TempDir(), "tree")
		must(os.Mkdir(d, 0o755))
		if bad.target != "" {
			must(os.Symlink(bad.target, filepath.Join(d, bad.name)))
		} else {
			must(os.WriteFile(filepath.Join(d, bad.name), nil, 0o644))
		}
		_, _, err := protofile(t, d)
		if err == nil {
			t.Errorf("%q -> %q: no error", bad.name, bad.target)
			continue
		}
		if !strings.Contains(err.Error(), filepath.Join(d, bad.name)) {
			t.Errorf("%q: the error does not name it: %v", bad.name, err)
		}
	}
}

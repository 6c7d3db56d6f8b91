package iosched

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const mountInfo = `22 1 253:0 / / rw,relatime shared:1 - xfs /dev/mapper/root rw,attr2,inode64,noquota
35 22 253:0 /ostree/deploy/fcos/var /var rw,relatime shared:5 - xfs /dev/mapper/root rw,attr2,inode64,noquota
40 22 252:16 / /var/lib/etcd rw,relatime shared:9 - ext4 /dev/vdb rw
41 22 252:32 / /srv/wb rw,relatime - ext4 /dev/vdc rw,data=writeback
42 22 252:48 / /srv/j rw,relatime - ext3 /dev/vdd rw,data=journal
43 22 252:64 / /mnt/with\040space rw,relatime master:2 propagate_from:1 - ext4 /dev/vde rw,errors=remount-ro
44 22 0:45 / /run rw,nosuid - tmpfs tmpfs rw,mode=755
`

func TestFilesystems(t *testing.T) {
	mi := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(mi, []byte(mountInfo), 0o644); err != nil {
		t.Fatal(err)
	}
	devs := map[string][2]uint32{
		"/sysroot": {253, 0}, "/var/lib/etcd": {252, 16}, "/srv/wb": {252, 32}, "/srv/j/x": {252, 48},
		"/mnt/with space": {252, 64}, "/run/x": {0, 45}, "/gone": {9, 9},
	}
	r := Resolver{MountInfo: mi, Stat: func(p string) (uint32, uint32, error) {
		d, ok := devs[p]
		if !ok {
			return 0, 0, os.ErrNotExist
		}
		return d[0], d[1], nil
	}}
	tests := []struct {
		path, mount, typ string
		orders           bool
		text             string
	}{
		{"/sysroot", "/", "xfs", false, "/sysroot (xfs at /)"},
		{"/var/lib/etcd", "/var/lib/etcd", "ext4", true, "/var/lib/etcd (ext4 data=ordered at /var/lib/etcd)"},
		{"/srv/wb", "/srv/wb", "ext4", false, "/srv/wb (ext4 data=writeback at /srv/wb)"},
		{"/srv/j/x", "/srv/j", "ext3", true, "/srv/j/x (ext3 data=journal at /srv/j)"},
		{"/mnt/with space", "/mnt/with space", "ext4", true, ""},
		{"/run/x", "/run", "tmpfs", false, ""},
	}
	for _, tc := range tests {
		fs, err := r.Filesystems([]string{tc.path})
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		f := fs[0]
		if f.Path != tc.path || f.MountPoint != tc.mount || f.Type != tc.typ || f.OrdersData() != tc.orders {
			t.Errorf("%s: got %+v orders=%v, want mount %s type %s orders=%v", tc.path, f, f.OrdersData(), tc.mount, tc.typ, tc.orders)
		}
		if tc.text != "" && f.String() != tc.text {
			t.Errorf("%s: String() = %q, want %q", tc.path, f.String(), tc.text)
		}
	}
	for _, bad := range []struct{ path, want string }{
		{"/gone", "finding the file system of /gone"},
		{"/nodev", "device 1:2 is not in " + mi},
	} {
		devs["/nodev"] = [2]uint32{1, 2}
		_, err := r.Filesystems([]string{"/sysroot", bad.path})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.path, err, bad.want)
		}
	}
	r.MountInfo = filepath.Join(t.TempDir(), "none")
	if _, err := r.Filesystems([]string{"/sysroot"}); err == nil || !strings.Contains(err.Error(), "reading the mount table") {
		t.Errorf("missing mountinfo: %v", err)
	}
}

// The real table of this host: the root's file system is found.
func TestFilesystemsOfThisHost(t *testing.T) {
	fs, err := Resolver{}.Filesystems([]string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if fs[0].Type == "" || fs[0].MountPoint == "" {
		t.Errorf("got %+v", fs[0])
	}
}

package guest

import (
	"strings"
	"testing"
)

func TestParseBootEntry(t *testing.T) {
	text := `title Debian GNU/Linux 12 (bookworm) (ostree:0)
version 2
options root=/dev/vda rw ostree=/ostree/boot.0/debian/abc/0
linux /ostree/debian-abc/vmlinuz-6.1.0-50-amd64
initrd /ostree/debian-abc/initramfs-6.1.0-50-amd64.img
`
	e, err := parseBootEntry("ostree-2-debian.conf", text)
	if err != nil {
		t.Fatal(err)
	}
	if e.version != 2 || e.linux != "/ostree/debian-abc/vmlinuz-6.1.0-50-amd64" ||
		e.initrd != "/ostree/debian-abc/initramfs-6.1.0-50-amd64.img" || e.options != "root=/dev/vda rw ostree=/ostree/boot.0/debian/abc/0" {
		t.Errorf("parsed %+v", e)
	}
	if _, err := parseBootEntry("x.conf", "title t\nversion 1\n"); err == nil {
		t.Error("an entry without linux/initrd/options parsed")
	}
	if _, err := parseBootEntry("x.conf", "version two\nlinux a\ninitrd b\noptions c\n"); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("bad version: err = %v", err)
	}
}

// ostree gives the default (first) deployment the highest version; after a
// finalization the new deployment is ostree-2, the old one the rollback.
func TestDefaultEntry(t *testing.T) {
	got, err := defaultEntry([]bootEntry{{name: "ostree-1-debian.conf", version: 1}, {name: "ostree-2-debian.conf", version: 2}})
	if err != nil || got.name != "ostree-2-debian.conf" {
		t.Errorf("defaultEntry = %+v, %v", got, err)
	}
	if _, err := defaultEntry(nil); err == nil {
		t.Error("no entries: no error")
	}
}

func TestBootFSPath(t *testing.T) {
	for in, want := range map[string]string{
		"/boot/ostree/debian-abc/vmlinuz": "/ostree/debian-abc/vmlinuz", // written at image build, /boot in the root
		"/ostree/debian-abc/vmlinuz":      "/ostree/debian-abc/vmlinuz", // written in the guest, /boot its own disk
	} {
		if got := bootFSPath(in); got != want {
			t.Errorf("bootFSPath(%q) = %q, want %q", in, got, want)
		}
	}
}

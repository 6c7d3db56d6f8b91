package standin

import "testing"

func TestImageBacking(t *testing.T) {
	for _, c := range []struct {
		in, want     string
		image, isErr bool
	}{
		{"fedora:os/stable", "", false, false},
		{"ostree-unverified-registry:fedora/os/stable", "fedora:os/stable", true, false},
		{"ostree-image-signed:docker://fedora/os/stable", "fedora:os/stable", true, false},
		{"ostree-unverified-image:registry:fedora/os/stable", "fedora:os/stable", true, false},
		{"ostree-remote-registry:fedora:fedora/os/stable", "fedora:os/stable", true, false},
		{"ostree-unverified-image:oci:/var/tmp/fcos", "", true, true},
		{"ostree-unverified-registry:fedora/os@sha256:ab", "", true, true},
		{"ostree-unverified-registry:fedora/os:stable", "fedora:os/stable", true, false},
		{"ostree-remote-registry:fedora:fedora/coreos/os:41.1", "fedora:coreos/os/41.1", true, false},
		{"ostree-unverified-registry:host:5000/os:stable", "", true, true},
		{"ostree-unverified-registry:fedora/os:", "", true, true},
	} {
		got, image, err := imageBacking(c.in)
		if got != c.want || image != c.image || (err != nil) != c.isErr {
			t.Errorf("imageBacking(%q) = %q, %v, %v", c.in, got, image, err)
		}
	}
}

// formatSize against GLib's g_format_size examples (glib/gutils.c docs).
func TestFormatSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 bytes", 1: "1 byte", 999: "999 bytes", 1000: "1.0 kB",
		2100: "2.1 kB", 20_400_000: "20.4 MB", 1_100_000_000: "1.1 GB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

package standin

import (
	"reflect"
	"strings"
	"testing"
)

// Output of libostree 2022.7's `ostree admin status` in the test guest.
const adminStatusOut = `  debian 225f1197c2c44df6372827b909a3e3767261927a6d02dedf2b8bb201fdeedb45.0 (staged)
    Version: update-1
    origin refspec: fedora:os/stable
* debian e2ccf3b756c0a8e69971ec21594360cbad859b966ebcc39dabc51db103fcc770.0
    Version: base
    origin refspec: debian/bookworm
  debian 1111111111111111111111111111111111111111111111111111111111111111.1 (rollback)
    origin refspec: fedora:os/stable
`

func TestParseAdminStatus(t *testing.T) {
	want := []adminDep{
		{osname: "debian", csum: "225f1197c2c44df6372827b909a3e3767261927a6d02dedf2b8bb201fdeedb45", origin: "fedora:os/stable", version: "update-1", staged: true},
		{osname: "debian", csum: "e2ccf3b756c0a8e69971ec21594360cbad859b966ebcc39dabc51db103fcc770", origin: "debian/bookworm", version: "base", booted: true},
		{osname: "debian", csum: strings.Repeat("1", 64), serial: 1, origin: "fedora:os/stable", rollback: true},
	}
	// As read by the CLI runner, which trims the staged line's indent.
	for _, out := range []string{adminStatusOut, strings.TrimSpace(adminStatusOut)} {
		got, err := parseAdminStatus(out)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("parseAdminStatus(%.20q...) =\n%+v\nwant\n%+v", out, got, want)
		}
	}
	if _, err := parseAdminStatus("  debian " + strings.Repeat("2", 64) + ".0\n"); err == nil {
		t.Error("status without a booted deployment parsed")
	}
}

func TestBootedOstree(t *testing.T) {
	for cmdline, want := range map[string]bool{
		"root=/dev/vda rw ostree=/ostree/boot.1/debian/abc/0 quiet": true,
		"root=/dev/vda rw quiet\n":                                  false,
		"root=/dev/vda myostree=1":                                  false,
	} {
		if got := bootedOstree(cmdline); got != want {
			t.Errorf("bootedOstree(%q) = %v", cmdline, got)
		}
	}
}

// TestOriginFile: what the stand-in stages on a real sysroot is what
// rpm-ostree writes (one of refspec and container-image-reference), and a
// container origin is read back from the origin file, other groups and
// keys aside.
func TestOriginFile(t *testing.T) {
	img := "ostree-unverified-registry:fedora/os/stable"
	if got := originFile(Dep{Origin: "fedora:os/stable", Image: img}); got != "[origin]\ncontainer-image-reference="+img+"\n" {
		t.Errorf("container origin file %q", got)
	}
	if got := originFile(Dep{Origin: "fedora:os/stable"}); got != "[origin]\nrefspec=fedora:os/stable\n" {
		t.Errorf("ostree origin file %q", got)
	}
	for kf, want := range map[string]string{
		originFile(Dep{Image: img}):            img,
		"[origin]\nrefspec=fedora:os/stable\n": "",
		"[packages]\ncontainer-image-reference=x\n[origin]\ncontainer-image-reference = " + img + "\n\n[rpmostree]\nx=1\n": img,
		"": "",
	} {
		if got := originImage(kf); got != want {
			t.Errorf("originImage(%q) = %q, want %q", kf, got, want)
		}
	}
}

package bootc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) *Host {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestChoose(t *testing.T) {
	image, pkg, none := fixture(t, "booted-only.json"), fixture(t, "package-mode.json"), fixture(t, "not-booted.json")
	broken := errors.New("reading bootc status: exit status 1")
	for _, tc := range []struct {
		name, configured, source string
		p                        Probe
		want, reasonSub, errSub  string
	}{
		{name: "auto, image-mode host", configured: "auto", source: "origin", p: Probe{Installed: true, Host: image},
			want: "bootc", reasonSub: "booted example/os:stable"},
		{name: "auto, package-mode host", configured: "auto", source: "origin", p: Probe{Installed: true, Host: pkg},
			want: "rpm-ostree", reasonSub: "does not manage"},
		{name: "auto, nothing booted", configured: "auto", source: "origin", p: Probe{Installed: true, Host: none},
			want: "rpm-ostree", reasonSub: "does not manage"},
		{name: "auto, no bootc", configured: "auto", source: "origin", p: Probe{}, want: "rpm-ostree", reasonSub: "not installed"},
		{name: "auto, image source", configured: "auto", source: "image", p: Probe{Installed: true, Host: image},
			want: "rpm-ostree", reasonSub: `updates.source = "image" needs rpm-ostree`},
		{name: "auto, graph source", configured: "auto", source: "graph", p: Probe{Installed: true, Host: image},
			want: "rpm-ostree", reasonSub: "needs rpm-ostree"},
		{name: "auto, status fails", configured: "auto", source: "origin", p: Probe{Installed: true, Err: broken},
			errSub: "set updates.backend"},
		{name: "bootc configured", configured: "bootc", source: "origin", p: Probe{Installed: true, Host: pkg},
			want: "bootc", reasonSub: "configured"},
		{name: "bootc configured, missing", configured: "bootc", source: "origin", p: Probe{}, errSub: "not installed"},
		{name: "rpm-ostree configured", configured: "rpm-ostree", source: "origin", p: Probe{Installed: true, Host: image},
			want: "rpm-ostree", reasonSub: "configured"},
	} {
		got, reason, err := Choose(tc.configured, tc.source, tc.p)
		if tc.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.errSub)
			}
			continue
		}
		if err != nil || got != tc.want || !strings.Contains(reason, tc.reasonSub) {
			t.Errorf("%s: Choose = %q, %q, %v; want %q (%q)", tc.name, got, reason, err, tc.want, tc.reasonSub)
		}
	}
}

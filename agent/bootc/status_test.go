package bootc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	d1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	d2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		file                  string
		managed               bool
		booted, staged        string
		downloadOnly          bool
		cached, image, errSub string
	}{
		{file: "booted-only.json", managed: true, booted: d1, image: "registry:example/os:stable"},
		{file: "booted-cached-update.json", managed: true, booted: d1, cached: d2, image: "registry:example/os:stable"},
		{file: "staged-download-only.json", managed: true, booted: d1, staged: d2, downloadOnly: true, image: "registry:example/os:stable"},
		{file: "staged-unlocked.json", managed: true, booted: d1, staged: d2, image: "registry:example/os:stable"},
		{file: "package-mode.json"},
		{file: "not-booted.json"},
		{file: "wrong-kind.json", errSub: `kind "Pod"`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			h, err := ParseStatus(b)
			if tc.errSub != "" {
				if err == nil || !contains(err.Error(), tc.errSub) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Managed() != tc.managed {
				t.Errorf("Managed = %v, want %v", h.Managed(), tc.managed)
			}
			if got := h.Status.Booted.Digest(); got != tc.booted {
				t.Errorf("booted digest %q, want %q", got, tc.booted)
			}
			if got := h.Status.Staged.Digest(); got != tc.staged {
				t.Errorf("staged digest %q, want %q", got, tc.staged)
			}
			if tc.staged != "" && h.Status.Staged.DownloadOnly != tc.downloadOnly {
				t.Errorf("downloadOnly %v, want %v", h.Status.Staged.DownloadOnly, tc.downloadOnly)
			}
			cached := ""
			if b := h.Status.Booted; b != nil && b.CachedUpdate != nil {
				cached = b.CachedUpdate.ImageDigest
			}
			if cached != tc.cached {
				t.Errorf("cached update %q, want %q", cached, tc.cached)
			}
			if got := h.Spec.Image.String(); got != tc.image {
				t.Errorf("spec image %q, want %q", got, tc.image)
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

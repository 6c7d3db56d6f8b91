package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSizesMixAndTotal(t *testing.T) {
	s := spec{Seed: 7, Size: 1200 << 20, Files: 10000, Mutate: 0.1}
	sizes := s.sizes()
	var total, small, big int64
	for _, n := range sizes {
		total += n
		if n < 64<<10 {
			small++
		}
		if n > 1<<20 {
			big++
		}
	}
	if d := total - s.Size; d > int64(s.Files) || d < -int64(s.Files) {
		t.Errorf("total %d, want ~%d", total, s.Size)
	}
	if small < 7000 || big < 100 || big > 2000 {
		t.Errorf("mix: %d small, %d over 1 MiB of %d", small, big, s.Files)
	}
}

func TestMutationFraction(t *testing.T) {
	s := spec{Seed: 3, Files: 5000, Mutate: 0.1}
	changed := 0
	for i := 0; i < s.Files; i++ {
		if s.lastChange(i, 2) != s.lastChange(i, 1) {
			changed++
		}
	}
	if changed < 400 || changed > 600 {
		t.Errorf("%d of %d files changed in one generation, want ~10%%", changed, s.Files)
	}
}

// The same spec gives the same bytes; an incremental update of a kept tree
// equals a tree written from scratch.
func TestDeterministicAndIncremental(t *testing.T) {
	dir := t.TempDir()
	s := spec{Seed: 5, Size: 1 << 20, Files: 40, Mutate: 0.5}
	inc, fresh := filepath.Join(dir, "inc"), filepath.Join(dir, "fresh")
	if err := writeTree(s, inc, filepath.Join(dir, "inc.json")); err != nil {
		t.Fatal(err)
	}
	s.Generation = 3
	if err := writeTree(s, inc, filepath.Join(dir, "inc.json")); err != nil {
		t.Fatal(err)
	}
	if err := writeTree(s, fresh, filepath.Join(dir, "fresh.json")); err != nil {
		t.Fatal(err)
	}
	diff := 0
	for i := 0; i < s.Files; i++ {
		a, _ := os.ReadFile(s.path(inc, i))
		b, _ := os.ReadFile(s.path(fresh, i))
		if !bytes.Equal(a, b) || len(a) == 0 {
			diff++
		}
	}
	if diff != 0 {
		t.Errorf("%d files differ between incremental and fresh trees", diff)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1.5GiB": 3 << 29, "4MiB": 4 << 20, "500M": 500e6, "4096": 4096} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "x", "-1M"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

// A bootable update (-base): the base commit's tree first, the files over
// it (ostree commit applies --tree options in order, later ones winning).
func TestCommitArgs(t *testing.T) {
	for _, tc := range []struct {
		base string
		want string
	}{
		{"", "commit --repo=/r --branch=os/stable --tree=dir=/w/tree --add-metadata-string=version=1.1"},
		{"abc", "commit --repo=/r --branch=os/stable --tree=ref=abc --tree=dir=/w/tree --add-metadata-string=version=1.1"},
	} {
		got := strings.Join(commitArgs("/r", "os/stable", "1.1", tc.base, "/w/tree"), " ")
		if !strings.HasPrefix(got, tc.want+" ") {
			t.Errorf("base %q: %s, want it to start with %s", tc.base, got, tc.want)
		}
	}
}

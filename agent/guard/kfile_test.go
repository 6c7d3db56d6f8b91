package guard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/guard/kernfstest"
)

// The file is opened once and read again from offset 0: a change in place
// is seen (as the kernel renders its files afresh), a file put in its
// place is not, until the open one fails as a removed cgroup's does;
// then the path is opened again, in the same Read.
func TestKernelFileStaysOpenAndReopensWhenGone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "memory.current")
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(path, "100\n")
	f := &KernelFile{Path: path, Pread: kernfstest.Pread}
	defer f.Close()
	read := func(want string) {
		t.Helper()
		b, err := f.Read()
		if err != nil || string(b) != want {
			t.Fatalf("read %q, %v; want %q", b, err, want)
		}
	}
	read("100\n")
	write(path, "200\n") // in place, as the kernel's counters change
	read("200\n")
	// Another file at the path, the open one kept (here under another
	// name): it still reads, so it was not opened again.
	keep := filepath.Join(dir, "kept")
	if err := os.Link(path, keep); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(dir, "next")
	write(next, "300\n")
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	read("200\n")
	// Now the open file is gone: ENODEV, as from a removed cgroup, and
	// the same Read opens the path again.
	os.Remove(keep)
	read("300\n")
	// No file at the path: the open error names it.
	os.Remove(path)
	if _, err := f.Read(); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "open "+path) {
		t.Errorf("err %v, want the open error naming the file", err)
	}
}

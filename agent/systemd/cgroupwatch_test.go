package systemd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// watched watches a new cgroup directory whose cgroup.events holds
// content; it returns the watch, the directory and the events file.
func watched(t *testing.T, content string) (*cgroupWatch, string, string) {
	t.Helper()
	dir := t.TempDir()
	events := filepath.Join(dir, "cgroup.events")
	if err := os.WriteFile(events, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := watchCgroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, dir, events
}

func TestCgroupWatchPopulated(t *testing.T) {
	w, _, events := watched(t, "populated 1\nfrozen 0\n")
	for _, c := range []struct {
		content string // "" removes the file: the cgroup is gone
		want    bool
		err     bool
	}{
		{"populated 1\nfrozen 0\n", true, false},
		{"populated 0\nfrozen 0\n", false, false},
		{"frozen 0\n", false, true},
		{"", false, false},
	} {
		if c.content == "" {
			os.Remove(events)
		} else if err := os.WriteFile(events, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := w.populated()
		if got != c.want || (err != nil) != c.err {
			t.Errorf("populated with %q = %v, %v; want %v, error %v", c.content, got, err, c.want, c.err)
		}
	}
	var none *cgroupWatch
	if _, err := none.populated(); err == nil {
		t.Error("a nil watch says it knows")
	}
}

// Next returns on a change of cgroup.events (an hour's fallback would
// hold the test until its timeout) and when ctx ends.
func TestCgroupWatchNext(t *testing.T) {
	w, dir, events := watched(t, "populated 1\n")
	// The kernel writes the file when the last process leaves.
	if err := os.WriteFile(events, []byte("populated 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Next(context.Background(), time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Next(ctx, time.Hour)
	if _, err := watchCgroup(filepath.Join(dir, "gone")); err == nil {
		t.Error("watching a cgroup that does not exist: no error")
	}
}

// Package atomicfile replaces files so that a crash at any moment leaves
// either the old or the new content on disk, never a torn file: write a
// temp file beside it, fsync, rename over it, fsync the directory so the
// rename itself is durable. Every record the agent must find again after a
// kill -9 or power cut (engine state, lease ID, undo journals, scheduler
// state, drop-ins) is written this way.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data and mode perm. The directory must exist.
func Write(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = SyncDir(dir); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs a directory, making renames and removals in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

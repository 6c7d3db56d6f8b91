package lock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// leaseFileName is the node lease's record in the state directory.
const leaseFileName = "lock-lease.json"

// leaseState is what survives the reboot: which lease holds our keys.
type leaseState struct {
	LeaseID int64  `json:"lease_id"`
	Group   string `json:"group"`
	Node    string `json:"node"`
	Prefix  string `json:"prefix"`
}

func readLeaseState(dir string) (leaseState, bool, error) {
	path := filepath.Join(dir, leaseFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return leaseState{}, false, nil
	}
	if err != nil {
		return leaseState{}, false, fmt.Errorf("reading lease state: %w", err)
	}
	var s leaseState
	if err := json.Unmarshal(b, &s); err != nil {
		return leaseState{}, false, fmt.Errorf("parsing lease state %s: %w", path, err)
	}
	return s, true, nil
}

// writeLeaseState replaces the file atomically and durably: the reboot that
// follows must find either the old or the new lease, never a torn file.
func writeLeaseState(dir string, s leaseState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, leaseFileName), append(b, '\n')); err != nil {
		return fmt.Errorf("saving lease state: %w", err)
	}
	return nil
}

func removeLeaseState(dir string) error {
	err := os.Remove(filepath.Join(dir, leaseFileName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing lease state: %w", err)
	}
	return syncDir(dir)
}

// writeFileAtomic writes a temp file, fsyncs it, renames it over path and
// fsyncs the directory so the rename itself is on disk.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

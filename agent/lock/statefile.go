package lock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/update-agent/update-agent/agent/atomicfile"
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
	if err := atomicfile.Write(filepath.Join(dir, leaseFileName), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("saving lease state: %w", err)
	}
	return nil
}

func removeLeaseState(dir string) error {
	err := os.Remove(filepath.Join(dir, leaseFileName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing lease state: %w", err)
	}
	return atomicfile.SyncDir(dir)
}

package lock

import (
	"fmt"
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
	var s leaseState
	found, err := atomicfile.ReadJSON(filepath.Join(dir, leaseFileName), &s)
	if err != nil {
		return leaseState{}, false, fmt.Errorf("reading lease state: %w", err)
	}
	return s, found, nil
}

// writeLeaseState replaces the record durably: the reboot that follows must
// find either the old or the new lease, never a torn file.
func writeLeaseState(dir string, s leaseState) error {
	if err := atomicfile.WriteJSON(filepath.Join(dir, leaseFileName), s); err != nil {
		return fmt.Errorf("saving lease state: %w", err)
	}
	return nil
}

func removeLeaseState(dir string) error {
	if err := atomicfile.Remove(filepath.Join(dir, leaseFileName)); err != nil {
		return fmt.Errorf("removing lease state: %w", err)
	}
	return nil
}

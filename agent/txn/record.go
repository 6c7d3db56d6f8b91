package txn

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
)

// RecordFile is the staging record's name in the state directory.
const RecordFile = "staging-transaction.json"

// Record is written right before a staging command starts and removed once
// it has ended: one left behind says that a process died while its staging
// transaction may still run in rpm-ostreed.
type Record struct {
	BootID  string    `json:"boot_id,omitempty"`
	PID     int       `json:"pid"`
	Method  string    `json:"method"`
	Argv    []string  `json:"argv"`
	Started time.Time `json:"started"`
}

func recordPath(dir string) string { return filepath.Join(dir, RecordFile) }

func loadRecord(dir string) (*Record, error) {
	var r Record
	found, err := atomicfile.ReadJSON(recordPath(dir), &r)
	if err != nil {
		return nil, fmt.Errorf("reading the staging transaction record: %w", err)
	}
	if !found {
		return nil, nil
	}
	return &r, nil
}

func saveRecord(dir string, r Record) error {
	if err := atomicfile.WriteJSON(recordPath(dir), r); err != nil {
		return fmt.Errorf("recording the staging transaction: %w", err)
	}
	return nil
}

func removeRecord(dir string) error {
	if err := atomicfile.Remove(recordPath(dir)); err != nil {
		return fmt.Errorf("removing the staging transaction record: %w", err)
	}
	return nil
}

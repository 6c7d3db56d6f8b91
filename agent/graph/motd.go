package graph

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/update-agent/update-agent/agent/atomicfile"
)

// MOTD is the dead-end notice as a motd line: pam_motd shows /run/motd.d/*.
type MOTD struct {
	// File, e.g. /run/motd.d/85-update-agent-deadend.
	File string
}

// Set writes the notice.
func (m MOTD) Set(version, reason string) error {
	if err := os.MkdirAll(filepath.Dir(m.File), 0o755); err != nil {
		return fmt.Errorf("writing the dead-end notice: %w", err)
	}
	msg := fmt.Sprintf("update-agent: this node runs %s, a dead-end release: no update leaves it (%s). Move the node to a supported release by hand.\n", version, reason)
	if err := atomicfile.Write(m.File, []byte(msg), 0o644); err != nil {
		return fmt.Errorf("writing the dead-end notice: %w", err)
	}
	return nil
}

// Clear removes the notice.
func (m MOTD) Clear() error {
	if err := atomicfile.Remove(m.File); err != nil {
		return fmt.Errorf("removing the dead-end notice: %w", err)
	}
	return nil
}

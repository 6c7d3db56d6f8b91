package systemd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/update-agent/update-agent/agent/atomicfile"
)

// Default directories: runtime unit files (vanish on reboot, which is what a
// policy for one staging window wants) and where systemd itself writes
// runtime SetUnitProperties settings.
const (
	RuntimeUnitDir    = "/run/systemd/system"
	RuntimeControlDir = "/run/systemd/system.control"
)

// DropInPath is the path of drop-in name for unit under dir.
func DropInPath(dir, unit, name string) string {
	return filepath.Join(dir, unit+".d", name)
}

// ControlFile is the file systemd writes for a runtime property set with
// SetUnitProperties(runtime=true).
func ControlFile(controlDir, unit, prop string) string {
	return DropInPath(controlDir, unit, "50-"+prop+".conf")
}

// WriteDropIn writes a drop-in atomically (temp file, fsync, rename) so
// systemd never reads half a file. The caller reloads systemd.
func WriteDropIn(dir, unit, name, content string) (string, error) {
	if strings.ContainsAny(unit+name, "/") || unit == "" || !strings.HasSuffix(name, ".conf") {
		return "", fmt.Errorf("drop-in %q for unit %q: bad name", name, unit)
	}
	p := DropInPath(dir, unit, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("writing drop-in %s: %w", p, err)
	}
	if err := atomicfile.Write(p, []byte(content), 0o644); err != nil {
		return "", fmt.Errorf("writing drop-in %s: %w", p, err)
	}
	return p, nil
}

// RemoveDropIn removes a drop-in (absent is fine) and its directory if that
// is left empty. It reports whether a file was removed.
func RemoveDropIn(path string) (bool, error) {
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing drop-in %s: %w", path, err)
	}
	_ = os.Remove(filepath.Dir(path)) // only succeeds when empty
	return true, nil
}

package owner

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// MCDName is OpenShift's machine-config-daemon: on RHCOS under the Machine
// Config Operator it is the host's update driver (it runs rpm-ostree and
// reboots the node), so the agent may only pace, never drive updates.
const MCDName = "machine-config-daemon"

// MCD looks for the machine-config-daemon. Root and Proc are injectable
// so tests (and doctor's --root) read a tree of their own.
type MCD struct {
	// Root prefixes /etc/machine-config-daemon (the daemon's state
	// directory on the host: currentconfig and friends); "" = "/".
	Root string
	// Proc is the proc file system whose processes are read; "" = /proc.
	Proc string
}

// Signs says what shows the machine-config-daemon here ("" = nothing):
// its state directory, or a process whose argv[0] is it (its comm is cut
// to 15 bytes, "machine-config-", so the command line is read).
func (m MCD) Signs() (string, error) {
	root, proc := m.Root, m.Proc
	if root == "" {
		root = "/"
	}
	if proc == "" {
		proc = "/proc"
	}
	dir := filepath.Join(root, "/etc", MCDName)
	switch st, err := os.Stat(dir); {
	case err == nil && st.IsDir():
		return dir + " exists", nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("looking for the machine-config-daemon: %w", err)
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return "", fmt.Errorf("looking for the machine-config-daemon: %w", err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "cmdline"))
		if err != nil {
			continue // gone since the listing, or a kernel thread
		}
		argv0, _, _ := bytes.Cut(b, []byte{0})
		if filepath.Base(string(argv0)) == MCDName {
			return fmt.Sprintf("process %s runs %s", e.Name(), argv0), nil
		}
	}
	return "", nil
}

// DescribeMCD is doctor's line for the machine-config-daemon: signs is
// what Signs found, enabled is updates.enabled and enabledFile the file
// that set it. Under the MCO the agent is a companion that paces, never
// the one that updates: an error while updates.enabled is true.
func DescribeMCD(signs string, enabled bool, enabledFile string) (string, error) {
	if signs == "" {
		return "no machine-config-daemon on this host", nil
	}
	const why = "the Machine Config Operator drives this host's updates (the machine-config-daemon runs rpm-ostree and reboots it): " +
		"the full agent must not drive updates here, only pace them as a companion"
	if enabled {
		return "", fmt.Errorf("%s: %s; set updates.enabled = false (now true, from %s)", signs, why, enabledFile)
	}
	return fmt.Sprintf("%s: %s; updates.enabled = false", signs, why), nil
}

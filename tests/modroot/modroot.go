// Package modroot finds the module's root directory, for the tests and
// tools that build the agent or read the repository's files.
package modroot

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Dir is the directory of the go.mod of the module the working directory
// belongs to (go env GOMOD).
func Dir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("finding the module root (go env GOMOD %q): not run inside the repository? %v", mod, err)
	}
	return filepath.Dir(mod), nil
}

// Must is Dir for a test: it fails the test when the root is not found.
func Must(t testing.TB) string {
	t.Helper()
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

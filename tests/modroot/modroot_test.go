package modroot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDirHoldsThisModule(t *testing.T) {
	dir := Must(t)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("%s has no go.mod: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tests", "modroot", "modroot.go")); err != nil {
		t.Errorf("%s is not this module's root: %v", dir, err)
	}
}

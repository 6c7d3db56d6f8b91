// Package modroot finds the module's root directory, for the tests and
// tools that build the agent or read the repository's files.
package modroot

import (
	"context"
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

// Build builds the module's package pkg ("./cmd/update-agent") into out,
// static (CGO_ENABLED=0) for a test guest whose libc may differ; it fails
// the test with go's output.
func Build(ctx context.Context, t testing.TB, out, pkg string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = Must(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
}

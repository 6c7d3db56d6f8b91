//go:build e2e

// Package e2e runs the agent in a real systemd guest (tests/guest). Run with
// `make e2e`; plain `go test ./...` skips it (build tag e2e).
package e2e

import (
	"testing"

	"github.com/update-agent/update-agent/tests/guest"
)

// TestMain stops the shared guest when the tests end, so no qemu is left.
func TestMain(m *testing.M) { guest.Main(m) }

//go:build e2e

// Package standin checks the rpm-ostree stand-in's units under real systemd
// in the test guest: finalization at shutdown, the lock, the update driver.
package standin

import (
	"testing"

	"github.com/update-agent/update-agent/tests/guest"
)

func TestMain(m *testing.M) { guest.Main(m) }

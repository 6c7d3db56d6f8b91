//go:build e2e

// Package staging checks gentle staging end to end in a real systemd guest
// (tests/guest): the transient unit's policy, the rpm-ostreed drop-in, bfq
// for the window, freezing, and the latency guard pacing a real stager (the
// rpm-ostree stand-in's daemon doing ostree I/O) beside an etcd-like load.
// `update-agent stage-once` runs the real agent/stage with the config.
package staging

import (
	"testing"

	"github.com/update-agent/update-agent/tests/guest"
)

// TestMain stops this package's guest when the tests end.
func TestMain(m *testing.M) { guest.Main(m) }

package cycle

import (
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/state"
)

// TestContainerOriginCycle: on a host booted from a signed container image
// (upgrade --check shows a layer diff, no digest, as upstream), the agent
// stages the update, adopts the staged image digest as its target, keeps
// it while the window is shut (its checks answer the staged digest, not
// the image name again), finalizes it and comes back idle on it.
func TestContainerOriginCycle(t *testing.T) {
	t.Parallel()
	a := newSolo(t)
	img := a.env.Image("ostree-image-signed:docker://")
	a.env.BootImage(img)
	a.env.Publish(a.env.Ref, 1)
	a.start()
	a.wait("a staged image digest, locked", func(s engine.Snapshot) bool {
		return s.State.Phase == state.Staged && s.OS.Staged != nil && strings.HasPrefix(s.OS.Staged.Checksum, "sha256:") &&
			s.State.Locked == s.OS.Staged.Checksum
	})
	target := a.eng.Snapshot().OS.Staged.Checksum
	if b := a.eng.Snapshot().OS.Booted.Checksum; b == target || !strings.HasPrefix(b, "sha256:") {
		t.Fatalf("booted %s, staged %s: want two digests", b, target)
	}
	// Rechecks (every 200ms) while the window is shut keep it.
	time.Sleep(1500 * time.Millisecond)
	if s := a.eng.Snapshot(); s.State.Target.Checksum != target || s.State.Locked != target {
		t.Fatalf("after more checks: target %s, locked %s; want %s", s.State.Target.Checksum, s.State.Locked, target)
	}
	a.openWindowAndReboot(target)
}

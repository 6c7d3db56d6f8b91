package cycle

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// bootcHost makes a solo agent drive its host through bootc, the way
// updates.backend = "bootc" wires it: stage `upgrade --download-only`,
// finalize `upgrade --from-downloaded --apply`, discard with rpm-ostree.
func bootcHost(a *solo) *bootc.Client {
	c := &bootc.Client{Path: bin.Bootc, Runner: oplog.Runner{Log: a.log, Env: a.env.BootcEnv()}}
	rpm := &rpmostree.Client{Path: bin.RpmOstree, Runner: oplog.Runner{Log: a.log,
		Env: a.env.ClientEnv("update-agent.service"), Interrupt: syscall.SIGINT}}
	a.backend = func() (engine.OS, engine.Stager) {
		// --apply never returns: give it a moment to fail, then read status.
		return adapters.BootcOS{Client: c, RpmOstree: rpm, ApplyWait: time.Second}, adapters.PlainBootcStager{Client: c}
	}
	return c
}

// bootcStagedByAgent starts a solo agent on bootc with an update published
// and waits until it staged it locked; it returns the target's digest.
func bootcStagedByAgent(t *testing.T) (*solo, *bootc.Client, string) {
	t.Helper()
	a := newSolo(t)
	c := bootcHost(a)
	a.env.Publish(a.env.Ref, 1)
	a.start()
	a.wait("staged and locked", func(s engine.Snapshot) bool {
		return s.State.Phase == state.Staged && s.OS.Staged != nil && s.State.Locked == s.OS.Staged.Checksum
	})
	return a, c, a.eng.Snapshot().State.Locked
}

func bootcStaged(t *testing.T, c *bootc.Client) *bootc.BootEntry {
	t.Helper()
	h, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h.Status.Staged
}

// TestBootcCycle: the engine on bootc stages the update download-only (an
// unplanned reboot loses it without applying it, and the agent stages it
// again although `upgrade --check` then says "No changes"), and applies it
// with --from-downloaded --apply once the window opens.
func TestBootcCycle(t *testing.T) {
	t.Parallel()
	a, c, target := bootcStagedByAgent(t)
	if s := bootcStaged(t, c); s.Digest() != target || !s.DownloadOnly {
		t.Fatalf("bootc shows staged %+v, want %s download-only", s, target)
	}
	booted := a.eng.Snapshot().OS.Booted.Checksum

	a.stop()
	a.env.UnplannedReboot()
	a.boot = "boot-2"
	if h, err := c.Status(context.Background()); err != nil || h.Status.Staged != nil || h.Status.Booted.Digest() != booted {
		t.Fatalf("an unplanned reboot applied or kept the download-only update: %+v %v", h, err)
	}
	a.start()
	a.waitStaged(target)
	if s := bootcStaged(t, c); !s.DownloadOnly {
		t.Fatal("staged again, but not download-only")
	}
	a.openWindowAndReboot(target)
	if !strings.Contains(a.logb.String(), "--from-downloaded --apply") {
		t.Error("the agent did not finalize with upgrade --from-downloaded --apply")
	}
	if h, _ := c.Status(context.Background()); h.Status.Rollback.Digest() != booted {
		t.Errorf("rollback %s, want the old booted %s", h.Status.Rollback.Digest(), booted)
	}
}

// TestBootcUnlockedBehindTheAgent: someone runs `bootc upgrade` (what
// bootc's own timer does, without --apply here) after the agent staged
// download-only: the staged update is now unlocked and any reboot would
// apply it without a slot. The agent, waiting for its window, sees the lock
// gone, discards the deployment and stages it again download-only; an
// orderly reboot then keeps the booted image.
func TestBootcUnlockedBehindTheAgent(t *testing.T) {
	t.Parallel()
	a, c, target := bootcStagedByAgent(t)
	booted := a.eng.Snapshot().OS.Booted.Checksum

	if out, stderr, code := a.env.Bootc(nil, "upgrade"); code != 0 || !strings.Contains(out, "will now be applied on reboot") {
		t.Fatalf("bootc upgrade: exit %d, %q %q; want the staged update unlocked", code, out, stderr)
	}
	a.wait("the unlocked deployment discarded", func(engine.Snapshot) bool {
		return strings.Contains(a.logb.String(), "unlocked outside the agent")
	})
	a.waitStaged(target)
	a.wait("staged download-only again", func(s engine.Snapshot) bool {
		st := bootcStaged(t, c)
		return st != nil && st.Digest() == target && st.DownloadOnly && !s.OS.Staged.Unlocked
	})

	a.stop()
	a.env.PlannedReboot()
	h, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Status.Booted.Digest(); got != booted {
		t.Fatalf("an orderly reboot without the slot booted %s, want the old %s: the unlocked update was applied", got, booted)
	}
}

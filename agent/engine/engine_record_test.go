package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/update-agent/update-agent/agent/state"
)

// TestNewerRecordAfterRollback: an older agent (after an OS rollback) meets
// the record of a newer agent of another schema, which had finalized (the
// staged deployment unlocked) while holding the slot. The engine does not
// exit (a restart loop); the record is set aside, the member's health is
// checked, the unlocked deployment discarded before the slot goes back,
// and then a whole cycle runs with a slot taken anew.
func TestNewerRecordAfterRollback(t *testing.T) {
	h := newHarness(t)
	h.disk = state.Store{Dir: h.dir}
	h.w.staged, h.w.locked = tgt.Checksum, false
	h.w.leases[0x42] = true
	body := `{"version":2,"minor":0,"phase":"finalizing","target":{"checksum":"new"},"locked":"new","queued":true,"slot":{"kind":"member"}}`
	if err := os.WriteFile(filepath.Join(h.dir, state.FileName), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	h.untilDone()
	h.checkEnd()
	if h.w.finalizes != 1 || h.w.releases != 2 {
		t.Errorf("finalizes %d releases %d, want 1 and 2 (the old slot, then the new one)", h.w.finalizes, h.w.releases)
	}
	if aside, _ := filepath.Glob(filepath.Join(h.dir, state.FileName+".newer-*")); len(aside) != 1 {
		t.Errorf("set aside: %v", aside)
	}
}

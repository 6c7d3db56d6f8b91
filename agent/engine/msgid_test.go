package engine

import (
	"testing"

	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/state"
)

func TestTransitionMessageID(t *testing.T) {
	for _, tc := range []struct {
		prev, next state.Phase
		failed     string
		want       string
	}{
		{state.Staging, state.Staged, "", logging.IDStaged},
		{state.Idle, state.Staged, "", ""}, // found staged at start: not staged now
		{state.WaitingSlot, state.HoldingSlot, "", logging.IDSlotTaken},
		{state.Staged, state.HoldingSlot, "", logging.IDSlotTaken},
		{state.HoldingSlot, state.HoldingSlot, "", ""},
		{state.HoldingSlot, state.Finalizing, "", logging.IDRebooting},
		{state.Verifying, state.Releasing, "", logging.IDUpdated},
		{state.Verifying, state.Releasing, "verify", ""}, // booted the wrong deployment
		{state.HoldingSlot, state.Releasing, "", ""},
		{state.Releasing, state.Idle, "", ""},
	} {
		if got := transitionMessageID(tc.prev, tc.next, tc.failed); got != tc.want {
			t.Errorf("%s -> %s (failed %q): %q, want %q", tc.prev, tc.next, tc.failed, got, tc.want)
		}
	}
}

package engine

import (
	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/state"
)

// transitionMessageID is the journal MESSAGE_ID of a phase change that is
// one of the key events (logging.ID*), "" for the others. failed is the
// step that failed with this decision, if any: a failed verification also
// goes from verifying to releasing, and is no update.
func transitionMessageID(prev, next state.Phase, failed string) string {
	switch {
	case prev == next:
		return ""
	case prev == state.Staging && next == state.Staged:
		return logging.IDStaged
	case next == state.HoldingSlot:
		return logging.IDSlotTaken
	case next == state.Finalizing:
		return logging.IDRebooting
	case prev == state.Verifying && next == state.Releasing && failed == "":
		return logging.IDUpdated
	}
	return ""
}

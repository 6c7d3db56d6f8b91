package logging

import "log/slog"

// messageIDKey is the attribute that becomes the entry's MESSAGE_ID field
// (not a field of its own, not in the message text).
const messageIDKey = "message_id"

// MessageID marks a record as one of the key events below, so that
// `journalctl MESSAGE_ID=...` finds every occurrence whatever the text says.
func MessageID(id string) slog.Attr { return slog.String(messageIDKey, id) }

// The key events' MESSAGE_IDs (128-bit, as journalctl --new-id128 makes
// them); docs/operations.md, "Reading the journal", lists them. Never reuse
// or change one: operators' queries and alerts name them.
const (
	// IDStaged: an update was staged (finalization locked).
	IDStaged = "3e6f2a1c9b7d4e0f8a5c2b1d7e9f0a41"
	// IDSlotTaken: the node took its reboot slot.
	IDSlotTaken = "5b0c9d8e7f6a4b3c2d1e0f9a8b7c6d52"
	// IDRebooting: finalize-deployment is being run: the host reboots.
	IDRebooting = "7a1b2c3d4e5f40718293a4b5c6d7e863"
	// IDUpdated: the node booted the target, was found healthy and let its
	// slot go.
	IDUpdated = "9c8d7e6f5a4b43c2d1e0f9a8b7c6d574"
	// IDSetAside: a target failed updates.max_attempts times and is set
	// aside.
	IDSetAside = "b2c3d4e5f6a741b8c9d0e1f2a3b4c585"
	// IDHeld: a reboot is held by a gate, quorum or member health.
	IDHeld = "d4e5f6a7b8c940d1e2f3a4b5c6d7e896"
)

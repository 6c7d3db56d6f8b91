package logging

import "log/slog"

// messageIDKey is the attribute that becomes the entry's MESSAGE_ID field
// (not a field of its own, not in the message text).
const messageIDKey = "message_id"

// MessageID marks a record as one of the key events below, so that
// `journalctl MESSAGE_ID=...` finds every occurrence whatever the text says.
func MessageID(id string) slog.Attr { return slog.String(messageIDKey, id) }

// The key events' MESSAGE_IDs: random 128-bit IDs, as `systemd-id128 new`
// makes them (IDs with a pattern may collide with another program's).
// docs/operations.md, "Reading the journal", lists them, and
// units/update-agent.catalog explains each to `journalctl -x` (a test keeps
// the three in step). Never reuse or change one: operators' queries and
// alerts name them.
const (
	// IDStaged: an update was staged (finalization locked).
	IDStaged = "e43996e837064e88b830a27880ebdd39"
	// IDSlotTaken: the node took its reboot slot.
	IDSlotTaken = "bec84e1dd68d495991ffcb0376ef8ffd"
	// IDRebooting: finalize-deployment is being run: the host reboots.
	IDRebooting = "773624ac907a4ee3bba78818994bf419"
	// IDUpdated: the node booted the target, was found healthy and let its
	// slot go.
	IDUpdated = "b894de9c3e7843c18fab88336c11bb69"
	// IDSetAside: a target failed updates.max_attempts times and is set
	// aside.
	IDSetAside = "5202daf13ddc436c9714f42ddc10fbe0"
	// IDHeld: a reboot is held by a gate, quorum or member health.
	IDHeld = "86ac74d9d9734f6bbdbe6a48c6f73fa1"
)

package lock

import (
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// KindFleetLock marks the Record of a FleetLock client: a zincati node queued
// by the FleetLock server (package fleetlock) in the same semaphore.
const KindFleetLock = "fleetlock"

// fleetLockPrefix keeps FleetLock client IDs apart from agents' node names,
// which cannot contain ':'.
const fleetLockPrefix = "fleetlock:"

// FleetLockNode is the queue name (holders/<name>) of FleetLock client id.
func FleetLockNode(id string) string { return fleetLockPrefix + id }

// HoldersPrefix is where a group's queue lives, see doc.go.
func HoldersPrefix(prefix, group string) string {
	return holdersPrefix(strings.TrimRight(prefix, "/"), group)
}

// Entries turns the keys under HoldersPrefix into queue entries.
func Entries(prefix, group string, kvs []*mvccpb.KeyValue) []Entry {
	entries, _ := entriesOf(kvs, HoldersPrefix(prefix, group), "")
	return entries
}

// FleetLockID is the client ID of a FleetLock queue name; ok is false for
// an agent's node name.
func FleetLockID(node string) (id string, ok bool) {
	return strings.CutPrefix(node, fleetLockPrefix)
}

// PendingPrefix is where a group's announcements live, see doc.go: the
// FleetLock server reads them for the leader rule of a local member's
// zincati.
func PendingPrefix(prefix, group string) string {
	return pendingPrefix(strings.TrimRight(prefix, "/"), group)
}

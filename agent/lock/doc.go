// Package lock is the reboot semaphore: at most Slots nodes of a group hold a
// reboot slot at once, in first-come-first-served order, and a slot survives
// the holder's own reboot but expires if the holder never comes back.
//
// # Keys
//
// Everything lives under <prefix>/<group>/:
//
//	<prefix>/<group>/holders/<node>  the queue: one key per node that wants
//	                                 or holds a slot. JSON Record: node,
//	                                 boot_id, target, member, machine_id,
//	                                 queued_at, acquired_at (zero while
//	                                 waiting); kind "fleetlock" for a
//	                                 FleetLock client, queued as
//	                                 fleetlock:<id> by package fleetlock on
//	                                 a lease of its own.
//	<prefix>/<group>/pending/<node>  announcement: this node has an update
//	                                 staged and will want to reboot. JSON
//	                                 Announcement: node, member, machine_id,
//	                                 target, announced_at.
//
// Node names default to host names, which two machines can share. Both keys
// carry the writer's /etc/machine-id, and a key of this node's name written
// by another machine is never adopted, moved, overwritten or deleted: the
// second machine gets a NameConflictError naming both IDs (a record without
// a machine ID, from an older agent, is ours only on our own lease).
//
// A node running an etcd member (Options.Member, looked up again at every
// acquisition, adoption and fence with Options.LocalMember) also queues under
//
//	<prefix>/_members/holders/<node> the member slot: one slot for the whole
//	                                 cluster, whatever the groups and their
//	                                 slots, so two members never go down
//	                                 together. Taken after the group's slot
//	                                 (the same order on every node, so no two
//	                                 wait on each other), released with it;
//	                                 a member's node holds only with both.
//
// With lock.min_interval set, a holder that rebooted holding its slot also
// writes, in the transaction that deletes its holder key,
//
//	<prefix>/_spacing/<group>        the group's last release: the queue
//	                                 name that released, on a lease of
//	                                 min_interval of its own (spacing.go);
//	                                 the group's next reboot waits while it
//	                                 lives.
//
// Whoever uses a group records its slot count for `lock status` on other
// hosts (groupconfig.go), without a lease. An agent reads it at each
// acquisition and takes no more than the smaller of its lock.slots and
// another writer's count, warning that they disagree (DecideSlots):
//
//	<prefix>/_groups/<group>         JSON GroupConfig: slots, by, updated_at.
//
// All keys of a node are attached to one lease, the node lease, whose TTL is
// the reboot budget. The agent keeps it alive while it runs; across the
// reboot nobody does, so a node that does not come back within the budget
// loses its slot and its announcement. The lease ID is persisted in the
// state directory (file "lock-lease.json") and re-adopted after boot; a key
// whose lease is re-adopted keeps its CreateRevision and therefore its place.
//
// # Order
//
// A key in holders/ holds a slot while fewer than Slots keys have a lower
// CreateRevision (Position): FIFO by etcd revision, no clocks involved. A
// waiter reads the queue once, then watches holders/ for deletions (with
// their previous values) from that read's revision and counts down the keys
// created before its own (AfterDeletion); it never polls and never re-reads
// per release, so a release costs the fleet one watch event each, not one
// range read each. It reads again only when the watch breaks (compaction, no
// leader) or cannot tell (its own key deleted).
// Nodes of a group must agree on Slots; a node configured with more slots
// than its peers could enter early.
//
// The member field of both records names the node's etcd member (empty when
// the node runs none); the ordering rules (package etcdmember) use it to make
// the leader go last.
//
// Writes that are only valid while holding a slot (Release, Fenced) are
// transactions that compare the holder key's lease and create revision with
// the node lease and the revision it acquired at. Fence is the same proof
// without a write, taken right before finalize-deployment (the engine's
// fence step): the keepalive still running, one keepalive round trip
// renewing the lease to a full TTL, then the transaction. A holder cut off
// from etcd past its TTL, whose slot went to another node, fails it and does
// not reboot.
package lock

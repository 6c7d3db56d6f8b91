// Package fleetlock serves zincati's FleetLock protocol (POST
// <base>/v1/pre-reboot, POST <base>/v1/steady-state) from the agents' own
// reboot semaphore (package lock), so Fedora CoreOS workers running zincati
// and hosts running update-agent take turns in one FIFO queue per group.
//
// A FleetLock client is a queue entry like an agent's: the key
// <prefix>/<group>/holders/fleetlock:<id> with a Record of kind "fleetlock".
// The client has no heartbeat, so each entry has a lease of its own (TTL:
// the reboot budget, lock.reboot_lease_ttl) that every serving process keeps
// alive (Tend) while the entry is wanted:
//
//   - a holder that was told so (AcquiredAt set) while its hold timer runs:
//     a lease of TTL max_hold granted with the slot and never kept alive,
//     or until the client's steady-state releases it;
//   - a waiter (or a holder not yet told) while its wait timer runs: a
//     lease of TTL QueueHold that each pre-reboot restarts. zincati asks
//     about every 5 minutes, so a client that went away stops blocking the
//     queue.
//
// The timers are etcd's, so servers whose clocks disagree agree on them.
// When a timer runs out a server revokes the entry's lease, which deletes
// the entry. Everything lives in etcd, so any number of servers may run and
// a serving node's own reboot loses nothing; with no server at all the
// entries live one lease TTL more.
//
// An entry belongs to the client that made it (Client: its peer address,
// and its verified certificate's names when it presented one): a request
// for that id from anyone else is refused (client_not_owner). New clients
// are bounded (Options.MaxWaiters, before any lease is granted), may be
// limited to an allow-list, and are refused when they are etcd members
// (MemberView.MemberOf: by name, URL host, or an address behind a member
// URL's host name; an unresolved name refuses), but for this host's own
// zincati when Options.LocalMember is set (local.go): it takes the group's
// slot and the cluster-wide member slot and passes the agents' leader rule
// and quorum check, leadership moved away before its 200. Each client address is
// rate limited (Options.Rate) before any etcd work, and the member list
// with its resolutions is kept a few seconds.
//
// pre-reboot never blocks: it queues the client (or refreshes its entry,
// keeping its place) and answers 200 when the entry holds a slot, and
// failed_lock_semaphore_full otherwise; zincati asks again later.
//
// Spacing (Options.MinInterval, lock.min_interval) is the agents' too: a
// client whose turn came is not granted while the group's spacing marker
// (package lock, spacing.go) lives, and gets failed_lock_min_interval with
// the time left; steady-state of a granted slot writes the marker in the
// transaction that deletes the entry.
package fleetlock

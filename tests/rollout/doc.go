// Package rollout tests the reboot coordination end to end against a real
// embedded etcd cluster: lock, ordering rules and MoveLeader together, with
// each node's etcd member stopped and restarted as its host reboots.
package rollout

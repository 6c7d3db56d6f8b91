// Package rollout is the one harness for rolling updates through the
// production engine: each host is an rpm-ostree stand-in doing real ostree
// I/O (tests/rpmostree/standintest) with the agent's engine (engine.New with
// agent/adapters over agent/lock, agent/etcdmember and the state store), and
// its etcd member one of a real embedded cluster (tests/etcdtest). Only the
// intervals differ from the daemon's (engine.Policy), so a rollout takes
// seconds.
//
// A host reboots when its engine finalizes: the harness sees the stand-in
// run its reboot command, stops the agent (keeping its lease) and the etcd
// member, runs the shutdown hook that applies the unlocked deployment, and
// starts the member and a new agent in a new boot.
//
// The tests in this package check rollouts; tests/bench/coord (build tag
// bench) measures them.
package rollout

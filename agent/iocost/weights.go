package iocost

import (
	"fmt"
	"strings"
)

// Weights are the cgroups a staging window weights, and how. iocost (and
// bfq) share a disk by weight among siblings: every cgroup not named
// keeps its own share. One decision for the journal's line and doctor's,
// so the two cannot disagree.
type Weights struct {
	// StagingUnit is "" in a foreign window (no staging unit).
	StagingUnit, DaemonUnit string
	// Stager is the IOWeight= on StagingUnit and DaemonUnit (0: theirs).
	Stager uint64
	// EtcdUnit gets Etcd (both set) or keeps its own weight.
	EtcdUnit string
	Etcd     uint64
}

// Others is what every cgroup the window does not name keeps.
const Others = "their own IOWeight (systemd's default 100)"

// WindowWeights is what a window gives: under iocost its own weights
// (staging.iocost_io_weight on the stager and the daemon, replacing the
// policy's staging.io_weight when set, and staging.iocost_etcd_io_weight
// on etcd's unit when known); without iocost the policy's weight alone.
func WindowWeights(iocostOn bool, stagingUnit, daemonUnit string, policyWeight, iocostWeight uint64, etcdUnit string, etcdWeight uint64) Weights {
	w := Weights{StagingUnit: stagingUnit, DaemonUnit: daemonUnit, Stager: policyWeight}
	if !iocostOn {
		return w
	}
	if iocostWeight > 0 {
		w.Stager = iocostWeight
	}
	if etcdUnit != "" && etcdWeight > 0 {
		w.EtcdUnit, w.Etcd = etcdUnit, etcdWeight
	}
	return w
}

// EtcdRaisedWeight is etcd's unit's IOWeight= under iocost where the
// journal does not order data: on XFS with etcd at its own weight (100)
// a learned window let etcd's WAL fsync p99 go x13.2 alone against x4.07
// (tests/bench/results/learn-xfs-200MiB-1).
const EtcdRaisedWeight uint64 = 10000

// EtcdWeight is the IOWeight= a window gives etcd's unit under iocost
// (0: left alone), and why: the configured one (staging.iocost_etcd_io_weight,
// 0 = "auto"), else left alone where the staging paths' journal orders
// data, else EtcdRaisedWeight. On ext4 (ordered) with the 8M page cache
// bound, etcd at its own weight staged in half the time, gave the other
// tenants their share and kept etcd's worst bucket <= 128-256 ms
// (tests/bench/results/auto-ext4-200MiB-1): a commit there waits for the
// stager's data whatever etcd's weight, and 10000 mostly starved the rest.
func EtcdWeight(configured uint64, ordersData bool) (uint64, string) {
	switch {
	case configured > 0:
		return configured, "as configured"
	case ordersData:
		return 0, "auto: left alone on a journal that orders data"
	}
	return EtcdRaisedWeight, "auto: raised on a journal that does not order data"
}

// EtcdRaised: the window gives etcd's unit its own weight.
func (w Weights) EtcdRaised() bool { return w.EtcdUnit != "" && w.Etcd > 0 }

func (w Weights) stagers() []string {
	var u []string
	for _, s := range []string{w.StagingUnit, w.DaemonUnit} {
		if s != "" {
			u = append(u, s)
		}
	}
	return u
}

// LogAttrs are the journal line's attributes.
func (w Weights) LogAttrs(etcdUnit string) []any {
	etcd := "its own (left alone)"
	if w.EtcdRaised() {
		etcd = fmt.Sprint(w.Etcd)
	}
	stager := "their own (left alone)"
	if w.Stager > 0 {
		stager = fmt.Sprint(w.Stager)
	}
	return []any{"staging_unit", w.StagingUnit, "daemon_unit", w.DaemonUnit, "stager_io_weight", stager,
		"etcd_unit", etcdUnit, "etcd_io_weight", etcd, "others", Others}
}

// String says it in a sentence (doctor).
func (w Weights) String() string {
	units := strings.Join(w.stagers(), " and ")
	if units == "" {
		units = "the stager"
	}
	var parts []string
	if w.Stager > 0 {
		parts = append(parts, fmt.Sprintf("IOWeight=%d on %s", w.Stager, units))
	} else {
		parts = append(parts, units+" keep their own IOWeight")
	}
	if w.EtcdRaised() {
		parts = append(parts, fmt.Sprintf("IOWeight=%d on %s", w.Etcd, w.EtcdUnit))
	} else {
		parts = append(parts, "etcd's unit keeps its own")
	}
	return strings.Join(parts, ", ") + "; every other cgroup keeps " + Others
}

package iocost

import (
	"fmt"
	"time"
)

// Targets is what the window's QoS is derived from.
type Targets struct {
	// BaselineP99 is etcd's WAL fsync p99 learned before the window (the
	// guard's baseline); 0 when unknown.
	BaselineP99 time.Duration
	// Promise is how far etcd's p99 may rise while staging (1.3).
	Promise float64
	// Fixed is the operator's latency target; 0 derives it.
	Fixed time.Duration
	// Default is the target without a baseline.
	Default time.Duration
	// Percentile is the completion-latency percentile held to the target.
	Percentile float64
	// VrateMin and VrateMax bound how far the kernel may scale the disk's
	// modelled rate (percent).
	VrateMin, VrateMax float64
}

// DeviceIOsPerFsync is how many device latencies one WAL fsync waits for:
// its data write and then the flush (on ext4 the journal commit's
// write behind it too). Measured on the harness (500 IOPS / 20
// MB/s, etcd alone at a p99 of 16-32 ms): a 20 ms target held the fsync
// p99 at 32 ms, a 50 ms one let it reach 128 ms, so the fsync p99 under
// iocost runs about twice the device target.
const DeviceIOsPerFsync = 2

// Latency target bounds. Below MinLatency the kernel holds vrate at its
// floor on any real disk (a flush alone takes milliseconds); above
// MaxLatency it no longer protects etcd (the 50 ms target measured x4-8).
const (
	MinLatency = 2 * time.Millisecond
	MaxLatency = 50 * time.Millisecond
)

// DeriveQoS is the window's io.cost.qos and where its latency target
// came from (for the journal): the operator's, or etcd's baseline p99
// times the promise spread over the device I/Os one fsync waits for, or
// the default.
func DeriveQoS(t Targets) (QoS, string) {
	var lat time.Duration
	var why string
	switch {
	case t.Fixed > 0:
		lat, why = t.Fixed, "configured"
	case t.BaselineP99 > 0 && t.Promise > 0:
		raw := time.Duration(float64(t.BaselineP99) * t.Promise / DeviceIOsPerFsync)
		lat = min(max(raw, MinLatency), MaxLatency)
		why = fmt.Sprintf("etcd's WAL fsync p99 before the window %s x %.2f / %d", t.BaselineP99.Round(time.Microsecond), t.Promise, DeviceIOsPerFsync)
		if lat != raw {
			why += fmt.Sprintf(", bounded to %s-%s", MinLatency, MaxLatency)
		}
	default:
		lat, why = t.Default, "default (no etcd baseline)"
	}
	us := uint64(lat / time.Microsecond)
	return QoS{Enable: true, User: true, RPct: t.Percentile, RLat: us, WPct: t.Percentile, WLat: us,
		Min: t.VrateMin, Max: t.VrateMax}, why
}

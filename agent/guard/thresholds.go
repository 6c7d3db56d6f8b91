package guard

import "time"

// Thresholds are the operator's [guard] settings as configured; Derive turns
// them into the controller's configuration.
type Thresholds struct {
	// LatencyFactor: freeze above this multiple of the normal p99.
	LatencyFactor float64
	// ThawFactor: thaw when the median is back within this multiple.
	ThawFactor float64
	// FsyncP99 is a configured WAL fsync p99 freeze threshold; 0 = learned.
	FsyncP99 time.Duration
	// IOPressurePercent is the PSI "some" share, in percent, above which
	// staging freezes; 0 = PSI not used.
	IOPressurePercent float64
	MinFreeze         time.Duration
	MaxFreeze         time.Duration
	MinRunShare       float64
	MaxTotalPause     time.Duration
}

// Derive returns the controller's configuration and the baseline entries
// the thresholds fix (nil when everything is learned).
func (t Thresholds) Derive() (Config, Baseline) {
	c := Config{
		FreezeFactor:   t.LatencyFactor,
		ThawFactor:     t.ThawFactor,
		MinFreeze:      t.MinFreeze,
		MaxFreeze:      t.MaxFreeze,
		MinRunShare:    t.MinRunShare,
		MaxTotalFrozen: t.MaxTotalPause,
	}
	if t.IOPressurePercent > 0 {
		// Thaw at half the freeze level: hysteresis against flapping.
		c.StallFreeze = t.IOPressurePercent / 100
		c.StallThaw = t.IOPressurePercent / 200
	}
	var b Baseline
	if t.FsyncP99 > 0 && t.LatencyFactor > 0 {
		// The guard freezes above LatencyFactor x baseline p99: a
		// configured threshold sets that p99; the median (thaw level) is
		// still learned.
		b = Baseline{MetricWALFsync: {P99: time.Duration(float64(t.FsyncP99) / t.LatencyFactor)}}
	}
	return c, b
}

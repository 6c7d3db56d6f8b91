package report

import (
	"math"
	"time"
)

// DiskIO is what a disk did over a span, every process together: reads
// and writes (qemu's throttle counts both).
type DiskIO struct {
	IOs, Bytes int64
	Span       time.Duration
}

// Disk limits, as the bench's throttle sets them.
type Limits struct {
	IOPS, BPS float64
}

// FloorSeconds is the least time the disk could have staged in: the
// staging window's I/O less what the loads did in it (their rate alone,
// from the same repetition's (a)), over the disk's capacity less the
// loads' use. A throttled disk charges a request max(1/IOPS, bytes/BPS)
// (the token buckets of qemu and of cloud block storage), so the floor is
// the larger of the two quotients. NaN where something is unknown or the
// loads alone use the whole disk.
func FloorSeconds(window, alone DiskIO, lim Limits) float64 {
	if window.Span <= 0 || alone.Span <= 0 || lim.IOPS <= 0 || lim.BPS <= 0 {
		return math.NaN()
	}
	loadIOPS := float64(alone.IOs) / alone.Span.Seconds()
	loadBPS := float64(alone.Bytes) / alone.Span.Seconds()
	spareIOPS, spareBPS := lim.IOPS-loadIOPS, lim.BPS-loadBPS
	if spareIOPS <= 0 || spareBPS <= 0 {
		return math.NaN()
	}
	ios := max(0, float64(window.IOs)-loadIOPS*window.Span.Seconds())
	bytes := max(0, float64(window.Bytes)-loadBPS*window.Span.Seconds())
	return max(ios/spareIOPS, bytes/spareBPS)
}

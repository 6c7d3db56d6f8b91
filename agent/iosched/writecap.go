package iosched

// WriteCap is how a staging window caps the stager's writes.
type WriteCap int

const (
	CapNone  WriteCap = iota // no cap
	CapFixed                 // staging.io_write_bandwidth_max as a rate
	CapStart                 // "auto" without the guard: the start rate, fixed
	CapLoop                  // "auto": the guard's rate loop sets it
)

// WriteCapMode decides the window's write cap (the stager's decision,
// which doctor reports). "auto" on a journal that orders data means no
// cap: an fsync there commits the journal, and the commit first waits for
// the stager's data already under write-back, at the cap's pace. Measured
// (full-ostree-ext4-600MiB-1, ext4 data=ordered, 3000 IOPS / 125 MB/s):
// the loop at its 4 MB/s floor made etcd's WAL fsync p99 x14 alone against
// x2.8 for plain staging, and staging 3.6x slower. The memory bound (how
// much dirty data a commit can find) and the guard's freezes pace it there
// instead. A fixed cap stays what the operator asked for.
//
// Under iocost, "auto" means no cap either: the kernel scales the
// stager's share from the disk's latency, and a cap on top would delay
// the write-back an ext4 commit waits for.
func WriteCapMode(auto bool, fixed uint64, guarded, ordersData, iocost bool) WriteCap {
	switch {
	case auto && iocost:
		return CapNone
	case auto && ordersData:
		return CapNone
	case auto && guarded:
		return CapLoop
	case auto:
		return CapStart
	case fixed > 0:
		return CapFixed
	}
	return CapNone
}

package stage

// filesystemsOrderData says which file systems, and journal modes, are
// behind the staging paths (logged: the journal is where an operator reads
// what staging did), and whether one of them orders data in its journal:
// ext4's data=ordered makes an fsync's commit wait for the stager's
// write-back, which changes what pacing may do (writeRateMode).
func (s *Stager) filesystemsOrderData() bool {
	fss, err := s.sched.Filesystems(s.o.Paths)
	if err != nil {
		s.log.Warn("cannot tell the staging paths' file systems", "err", err)
		return false
	}
	var names []string
	ordered := false
	for _, f := range fss {
		names = append(names, f.String())
		ordered = ordered || f.OrdersData()
	}
	s.log.Info("staging paths' file systems", "file_systems", names, "journal_orders_data", ordered)
	return ordered
}

// writeRate is how the staging window caps writes.
type writeRate int

const (
	rateNone  writeRate = iota // no cap
	rateFixed                  // Options.WriteBandwidthMax
	rateStart                  // "auto" without a guard: the start rate, fixed
	rateLoop                   // "auto": the rate controller sets it
)

// writeRateMode decides the window's write cap. "auto" on a journal that
// orders data means no cap: an fsync there commits the journal, and the
// commit first waits for the stager's data already under write-back, at
// the cap's pace. Measured (full-ostree-ext4-600MiB-1, ext4 data=ordered,
// 3000 IOPS / 125 MB/s): the loop at its 4 MB/s floor made etcd's WAL
// fsync p99 x14 alone against x2.8 for plain staging, and staging 3.6x
// slower. The memory bound (how much dirty data a commit can find) and
// the guard's freezes pace it there instead. A fixed cap stays what the
// operator asked for.
//
// Under iocost, "auto" means no cap either: the kernel scales the
// stager's share from the disk's latency, and a cap on top would delay
// the write-back an ext4 commit waits for.
func writeRateMode(auto bool, fixed uint64, guarded, ordersData, iocost bool) writeRate {
	switch {
	case auto && iocost:
		return rateNone
	case auto && ordersData:
		return rateNone
	case auto && guarded:
		return rateLoop
	case auto:
		return rateStart
	case fixed > 0:
		return rateFixed
	}
	return rateNone
}

package stage

import "github.com/update-agent/update-agent/agent/iosched"

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

// writeRate is how the staging window caps writes (iosched.WriteCapMode
// decides it; doctor reports the same decision).
type writeRate = iosched.WriteCap

const (
	rateNone  = iosched.CapNone
	rateFixed = iosched.CapFixed
	rateStart = iosched.CapStart
	rateLoop  = iosched.CapLoop
)

var writeRateMode = iosched.WriteCapMode

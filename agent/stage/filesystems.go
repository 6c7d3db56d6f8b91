package stage

// logFilesystems says which file systems, and journal modes, are behind
// the staging paths: the bench found pacing behave differently on ext4's
// ordered journal (an fsync's commit waits for the stager's data) and on
// XFS, and the journal is where an operator reads what staging did.
func (s *Stager) logFilesystems() {
	fss, err := s.sched.Filesystems(s.o.Paths)
	if err != nil {
		s.log.Warn("cannot tell the staging paths' file systems", "err", err)
		return
	}
	var names []string
	ordered := false
	for _, f := range fss {
		names = append(names, f.String())
		ordered = ordered || f.OrdersData()
	}
	s.log.Info("staging paths' file systems", "file_systems", names, "journal_orders_data", ordered)
}

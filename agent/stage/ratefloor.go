package stage

import (
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iosched"
)

// rateConfig is the rate controller's tuning for the file systems behind
// the staging paths.
func (s *Stager) rateConfig() guard.RateConfig {
	fss, err := s.sched.Filesystems(s.o.Paths)
	if err != nil {
		s.log.Warn("cannot tell the staging paths' file systems: the write cap may be cut to its minimum", "err", err)
		return s.o.WriteRate
	}
	rc, ordered := RateFloor(s.o.WriteRate, fss)
	if len(ordered) > 0 {
		var names []string
		for _, f := range ordered {
			names = append(names, f.String())
		}
		s.log.Info("a journal that orders data is behind the staging paths: the write cap is not cut below its start rate",
			"file_systems", names, "min_write_rate_mbps", float64(rc.Min)/1e6)
	}
	return rc
}

// RateFloor raises the rate controller's minimum to its start rate when a
// staging path is on a file system whose journal orders data (ext4's
// default): there an fsync's journal commit waits for the data the stager
// has in flight, which drains at the cap, so a lower cap lengthens etcd's
// fsync instead of shortening it. Measured on the 20 MB/s disk, ext4:
// cut to 1 MB/s, etcd's WAL fsync p99 was 48x alone against 32x with no
// pacing at all. It returns the file systems that raised it.
func RateFloor(rc guard.RateConfig, fss []iosched.Filesystem) (guard.RateConfig, []iosched.Filesystem) {
	var ordered []iosched.Filesystem
	for _, f := range fss {
		if f.OrdersData() {
			ordered = append(ordered, f)
		}
	}
	if len(ordered) > 0 {
		d := rc.WithDefaults()
		rc.Min = max(d.Min, d.Start)
	}
	return rc, ordered
}

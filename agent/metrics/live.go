package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/update-agent/update-agent/agent/guard"
)

// liveCollector reads the open staging window's pacing at each scrape:
// the brake and etcd's WAL latency exist only while a window is open, so
// their series are absent otherwise (an alert on them fires only then).
type liveCollector struct {
	r                                guard.LiveReader
	open, brake, rate, p99, baseline *prometheus.Desc
}

// WatchPacing exports r's live pacing (guard.Board) with the registry.
func (m *Metrics) WatchPacing(r guard.LiveReader) {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, nil, nil)
	}
	m.Registry.MustRegister(liveCollector{r: r,
		open:     d("staging_window_open", "1 while a staging window is open (the agent's staging or a paced foreign transaction), else 0."),
		brake:    d("guard_brake_engaged", "While a guarded window is open: 1 while the latency guard's brake holds the staging units frozen, 0 when not."),
		rate:     d("guard_write_rate_bytes_per_second", "While a window paced by the write rate loop is open: the loop's rate."),
		p99:      d("etcd_wal_fsync_p99_seconds", "While a guarded window is open: etcd's WAL fsync p99 over the guard's last sample."),
		baseline: d("etcd_wal_fsync_p99_baseline_seconds", "While a guarded window is open: the baseline WAL fsync p99 the guard judges etcd against."),
	})
}

func (c liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.open, c.brake, c.rate, c.p99, c.baseline} {
		ch <- d
	}
}

func (c liveCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range liveSeries(c.r.Live()) {
		desc := map[string]*prometheus.Desc{"open": c.open, "brake": c.brake, "rate": c.rate, "p99": c.p99, "baseline": c.baseline}[s.name]
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, s.v)
	}
}

type series struct {
	name string
	v    float64
}

// liveSeries decides which live series exist and their values.
func liveSeries(l guard.Live, open bool) []series {
	if !open {
		return []series{{"open", 0}}
	}
	out := []series{{"open", 1}}
	if !l.Guarded {
		return out
	}
	brake := 0.0
	if l.Braking {
		brake = 1
	}
	out = append(out, series{"brake", brake})
	if l.Rate > 0 {
		out = append(out, series{"rate", float64(l.Rate)})
	}
	if l.WALP99 > 0 {
		out = append(out, series{"p99", l.WALP99.Seconds()})
	}
	if l.WALBaseline > 0 {
		out = append(out, series{"baseline", l.WALBaseline.Seconds()})
	}
	return out
}

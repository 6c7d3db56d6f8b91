package metrics

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
)

// TestLivePacing: the brake and etcd's WAL latency are exported from the
// board while a window is open, and only then.
func TestLivePacing(t *testing.T) {
	for _, tc := range []struct {
		name string
		open bool
		live guard.Live
		want map[string]float64
	}{
		{"no window", false, guard.Live{}, map[string]float64{"staging_window_open": 0}},
		{"window without a guard", true, guard.Live{Pacing: "fixed write cap"}, map[string]float64{"staging_window_open": 1}},
		{"guarded, brake off, iocost", true,
			guard.Live{Pacing: "iocost (vda learned)", Guarded: true, WALP99: 12 * time.Millisecond, WALBaseline: 10 * time.Millisecond},
			map[string]float64{"staging_window_open": 1, "guard_brake_engaged": 0, "etcd_wal_fsync_p99_seconds": 0.012, "etcd_wal_fsync_p99_baseline_seconds": 0.01}},
		{"rate loop braking, no fsync seen yet", true,
			guard.Live{Pacing: "write rate loop", Guarded: true, Braking: true, Rate: 8 << 20, WALBaseline: 10 * time.Millisecond},
			map[string]float64{"staging_window_open": 1, "guard_brake_engaged": 1, "guard_write_rate_bytes_per_second": 8 << 20, "etcd_wal_fsync_p99_baseline_seconds": 0.01}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New("test")
			// The guard's own path to its board is tested in agent/stage.
			m.WatchPacing(fixedLive{tc.live, tc.open})
			mfs, err := m.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, mf := range mfs {
				name, ok := strings.CutPrefix(mf.GetName(), "update_agent_")
				if !ok || !(strings.HasPrefix(name, "staging_window") || strings.HasPrefix(name, "guard_brake") || strings.HasPrefix(name, "guard_write_rate") || strings.HasPrefix(name, "etcd_wal")) {
					continue
				}
				got[name] = mf.GetMetric()[0].GetGauge().GetValue()
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

type fixedLive struct {
	l  guard.Live
	ok bool
}

func (f fixedLive) Live() (guard.Live, bool) { return f.l, f.ok }

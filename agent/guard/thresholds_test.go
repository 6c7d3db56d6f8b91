package guard

import (
	"reflect"
	"testing"
	"time"
)

func TestThresholdsDerive(t *testing.T) {
	ms := time.Millisecond
	base := Thresholds{LatencyFactor: 2, ThawFactor: 1.5, MinFreeze: 200 * ms, MaxFreeze: 2 * time.Second,
		MinRunShare: 0.2, MaxTotalPause: 30 * time.Minute}
	baseCfg := Config{FreezeFactor: 2, ThawFactor: 1.5, MinFreeze: 200 * ms, MaxFreeze: 2 * time.Second,
		MinRunShare: 0.2, MaxTotalFrozen: 30 * time.Minute}
	for _, tc := range []struct {
		name     string
		edit     func(*Thresholds)
		wantCfg  func(*Config)
		baseline Baseline
	}{
		{name: "all learned, PSI off", edit: func(*Thresholds) {}, wantCfg: func(*Config) {}},
		{name: "PSI 40%: freeze at 0.4, thaw at half",
			edit:    func(t *Thresholds) { t.IOPressurePercent = 40 },
			wantCfg: func(c *Config) { c.StallFreeze, c.StallThaw = 0.4, 0.2 }},
		{name: "fsync threshold 40ms at factor 2: normal p99 20ms",
			edit:     func(t *Thresholds) { t.FsyncP99 = 40 * ms },
			wantCfg:  func(*Config) {},
			baseline: Baseline{MetricWALFsync: {P99: 20 * ms}}},
		{name: "fsync threshold 30ms at factor 3: normal p99 10ms",
			edit:     func(t *Thresholds) { t.FsyncP99, t.LatencyFactor = 30*ms, 3 },
			wantCfg:  func(c *Config) { c.FreezeFactor = 3 },
			baseline: Baseline{MetricWALFsync: {P99: 10 * ms}}},
		{name: "no factor: the threshold is not turned into a baseline",
			edit:    func(t *Thresholds) { t.FsyncP99, t.LatencyFactor = 30*ms, 0 },
			wantCfg: func(c *Config) { c.FreezeFactor = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := base
			tc.edit(&th)
			want := baseCfg
			tc.wantCfg(&want)
			c, b := th.Derive()
			if c != want {
				t.Errorf("config\n got %+v\nwant %+v", c, want)
			}
			if !reflect.DeepEqual(b, tc.baseline) {
				t.Errorf("baseline %v, want %v", b, tc.baseline)
			}
		})
	}
}

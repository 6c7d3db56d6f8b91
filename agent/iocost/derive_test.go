package iocost

import (
	"strings"
	"testing"
	"time"
)

func TestDeriveQoS(t *testing.T) {
	ms := time.Millisecond
	base := Targets{Promise: 1.3, Default: 20 * ms, Percentile: 95, VrateMin: 5, VrateMax: 150}
	cases := []struct {
		name    string
		mod     func(*Targets)
		wantLat uint64 // microseconds
		why     string
	}{
		{"no baseline: the default", func(*Targets) {}, 20000, "default"},
		{"the harness's alone p99 of 32ms: 32 x 1.3 / 2", func(t *Targets) { t.BaselineP99 = 32 * ms }, 20800, "32ms x 1.30 / 2"},
		{"a fast disk's 1ms p99 is held to the lower bound", func(t *Targets) { t.BaselineP99 = ms }, 2000, "bounded"},
		{"a slow disk's 100ms p99 is held to the upper bound", func(t *Targets) { t.BaselineP99 = 100 * ms }, 50000, "bounded"},
		{"the operator's target wins over the baseline", func(t *Targets) { t.BaselineP99 = 32 * ms; t.Fixed = 7 * ms }, 7000, "configured"},
		{"no promise: the default", func(t *Targets) { t.BaselineP99 = 32 * ms; t.Promise = 0 }, 20000, "default"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := base
			c.mod(&in)
			q, why := DeriveQoS(in)
			want := QoS{Enable: true, User: true, RPct: 95, WPct: 95, RLat: c.wantLat, WLat: c.wantLat, Min: 5, Max: 150}
			if q != want {
				t.Errorf("DeriveQoS = %+v, want %+v", q, want)
			}
			if !strings.Contains(why, c.why) {
				t.Errorf("why %q, want it to say %q", why, c.why)
			}
			if err := q.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestQoSValidate(t *testing.T) {
	for _, q := range []QoS{
		{RPct: 101, Min: 5, Max: 150},
		{RPct: 95, Min: 0, Max: 150},
		{RPct: 95, Min: 50, Max: 10},
	} {
		if q.Validate() == nil {
			t.Errorf("%+v passed", q)
		}
	}
}

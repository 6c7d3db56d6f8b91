package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/iocost"
)

// The io weights line says who the window weights, as the stager's
// journal line does (iocost.WindowWeights), for each kind of window.
func TestIOWeights(t *testing.T) {
	const others = "every other cgroup keeps their own IOWeight (systemd's default 100)"
	for _, tc := range []struct {
		name   string
		change func(*Doctor)
		want   string
	}{
		{"iocost, the defaults", func(*Doctor) {},
			"under iocost on vda: IOWeight=1 on update-agent-staging.service and rpm-ostreed.service, IOWeight=10000 on etcd.service; " + others},
		{"iocost off: the policy's weight", func(d *Doctor) { d.In.IOCost = iocost.Off },
			"no iocost in the window (see pacing): IOWeight=10 on update-agent-staging.service and rpm-ostreed.service, etcd's unit keeps its own; " + others +
				" (staging.io_weight; without iocost only the bfq scheduler honours it)"},
		{"the kernel has no iocost", func(d *Doctor) { io := d.IO.(fakeIO); io.costErr = errors.New("no io.cost.qos"); d.IO = io },
			"no iocost in the window (see pacing): IOWeight=10 on"},
		{"no staging paths: no disk for iocost", func(d *Doctor) { d.In.StagingPaths = nil },
			"no iocost in the window (see pacing): IOWeight=10 on update-agent-staging.service and rpm-ostreed.service"},
		{"companion mode: the daemon alone", func(d *Doctor) { d.In.UpdatesDisabled, d.In.PaceForeign = true, true },
			"under iocost on vda: IOWeight=1 on rpm-ostreed.service, IOWeight=10000 on etcd.service"},
		{"no etcd unit", func(d *Doctor) { d.In.LocalUnit = "" },
			"etcd's unit keeps its own; " + others + " (staging.iocost_io_weight; etcd.local_unit's from staging.iocost_etcd_io_weight, as configured); etcd.local_unit is unset, so staging.iocost_etcd_io_weight goes nowhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := good()
			tc.change(&d)
			var got []string
			for _, r := range d.Run(context.Background()) {
				if r.Check == "io weights" {
					if !r.OK {
						t.Errorf("not ok: %+v", r)
					}
					got = append(got, r.Detail)
				}
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Errorf("io weights %q, want one containing %q", got, tc.want)
			}
		})
	}
}

package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestFloorSeconds(t *testing.T) {
	lim := Limits{IOPS: 500, BPS: 20e6}
	// The loads alone: 100 I/Os and 1 MB a second.
	alone := DiskIO{IOs: 3000, Bytes: 30e6, Span: 30 * time.Second}
	cases := []struct {
		name   string
		window DiskIO
		want   float64
	}{
		// 100 s: the loads' 10,000 I/Os and 100 MB go; the staging's
		// 4,000 I/Os need 10 s of the 400 spare IOPS, its 190 MB 10 s of
		// the 19 MB/s spare: bytes bound it.
		{"bytes bound", DiskIO{IOs: 14000, Bytes: 290e6, Span: 100 * time.Second}, 190e6 / 19e6},
		// Small requests: 20,000 I/Os of the staging need 50 s.
		{"I/Os bound", DiskIO{IOs: 30000, Bytes: 110e6, Span: 100 * time.Second}, 20000.0 / 400},
		{"no window", DiskIO{}, math.NaN()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := FloorSeconds(c.window, alone, lim)
			if !(math.IsNaN(c.want) && math.IsNaN(got)) && math.Abs(got-c.want) > 1e-9 {
				t.Errorf("FloorSeconds = %v, want %v", got, c.want)
			}
		})
	}
	if got := FloorSeconds(DiskIO{IOs: 1, Bytes: 1, Span: time.Second}, DiskIO{IOs: 600, Bytes: 1, Span: time.Second}, lim); !math.IsNaN(got) {
		t.Errorf("loads over the disk's IOPS: floor %v, want NaN", got)
	}
}

// The summary carries the floor and the efficiency of a staging against
// its repetition's (a).
func TestSummaryFloor(t *testing.T) {
	lim := Limits{IOPS: 500, BPS: 20e6}
	tb := Table{Rows: []Row{
		{Disk: "d", Load: "etcd", Scenario: ScenarioAlone, Rep: 1, P99: 10 * ms, IO: DiskIO{IOs: 3000, Bytes: 30e6, Span: 30 * time.Second}, Limits: lim},
		{Disk: "d", Load: "etcd", Scenario: ScenarioAgent, Rep: 1, P99: 12 * ms, Staging: 40 * time.Second,
			IO: DiskIO{IOs: 14000, Bytes: 290e6, Span: 100 * time.Second}, Limits: lim},
	}}
	s := tb.Summary()[1]
	if math.Abs(s.Floor.Med-10) > 1e-9 || math.Abs(s.Efficiency.Med-0.25) > 1e-9 {
		t.Errorf("floor %+v efficiency %+v, want 10 s and 0.25", s.Floor, s.Efficiency)
	}
	var b bytes.Buffer
	if err := tb.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "floor_s") || !strings.Contains(b.String(), "0.25") {
		t.Errorf("summary:\n%s", b.String())
	}
}

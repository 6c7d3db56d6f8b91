package guard

import (
	"testing"
	"time"
)

// The window's vrate: each reading holds until the next (the mean weighs
// by that), disks apart, readings without a vrate (iocost off, a line
// without cost.vrate) skipped.
func TestVrateSpan(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var v VrateSpan
	v.Add(at(0), map[string]CostStat{"vdb": {Vrate: 100}})
	v.Add(at(10), map[string]CostStat{"vdb": {Vrate: 270}, "vda": {Vrate: 50}})
	v.Add(at(11), nil)
	v.Add(at(12), map[string]CostStat{"vdb": {}}) // not printed: skipped
	v.Add(at(40), map[string]CostStat{"vdb": {Vrate: 340}, "vda": {Vrate: 150}})
	got := v.Summaries()
	want := []VrateSummary{
		// vda: 50 % for 30 s, then the end.
		{Disk: "vda", Min: 50, Mean: 50, Max: 150, Last: 150, Readings: 2},
		// vdb: 100 % for 10 s, 270 % for 30 s.
		{Disk: "vdb", Min: 100, Mean: (100*10 + 270*30) / 40.0, Max: 340, Last: 340, Readings: 3},
	}
	if len(got) != len(want) {
		t.Fatalf("summaries %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("summary %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	var none VrateSpan
	if s := none.Summaries(); len(s) != 0 {
		t.Errorf("no readings: %+v, want none", s)
	}
}

// The root's line carries the vrate beside the usage.
func TestParseCostVrate(t *testing.T) {
	u, v := parseCost(rootIOStat)
	if u["254:0"] != 782142539 || v["254:0"] != 100 || len(v) != 1 {
		t.Errorf("parseCost = %v, %v; want 254:0 at 782142539 µs and vrate 100 alone", u, v)
	}
}

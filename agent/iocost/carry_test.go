package iocost

import "testing"

func TestRebase(t *testing.T) {
	qos := QoS{Enable: true, User: true, WPct: 99, WLat: 10000, Min: 5, Max: 1000}
	seed := Seed
	cases := []struct {
		name      string
		model     *Model
		carried   float64
		wantModel *Model
		wantQoS   QoS
	}{
		{"fresh enable: 100 %", &seed, 100, &seed, qos},
		{"within the kernel's rounding", &seed, 100.3, &seed, qos},
		{"vrate unread", &seed, 0, &seed, qos},
		{"the kernel's model in force", nil, 174.61, nil, qos},
		{"carried up: the model down by as much, the bounds up", &Model{User: true, RBps: 174610, RSeqIOPS: 1746, RRandIOPS: 1746, WBps: 174610, WSeqIOPS: 1746, WRandIOPS: 1746}, 174.61,
			&Model{User: true, RBps: 100000, RSeqIOPS: 1000, RRandIOPS: 1000, WBps: 100000, WSeqIOPS: 1000, WRandIOPS: 1000},
			QoS{Enable: true, User: true, WPct: 99, WLat: 10000, Min: 5 * 1.7461, Max: 1000 * 1.7461}},
		{"carried down", &Model{User: true, RBps: 50, RSeqIOPS: 50, RRandIOPS: 50, WBps: 50, WSeqIOPS: 50, WRandIOPS: 50}, 50,
			&Model{User: true, RBps: 100, RSeqIOPS: 100, RRandIOPS: 100, WBps: 100, WSeqIOPS: 100, WRandIOPS: 100},
			QoS{Enable: true, User: true, WPct: 99, WLat: 10000, Min: 2.5, Max: 500}},
		{"bounds within the kernel's 1-10000 %", &seed, 2000, &Model{User: true, RBps: Seed.RBps / 20, RSeqIOPS: 25, RRandIOPS: 25, WBps: Seed.WBps / 20, WSeqIOPS: 25, WRandIOPS: 25},
			QoS{Enable: true, User: true, WPct: 99, WLat: 10000, Min: 100, Max: 10000}},
		{"bounds at least 1 %", &seed, 10, &Model{User: true, RBps: Seed.RBps * 10, RSeqIOPS: 5000, RRandIOPS: 5000, WBps: Seed.WBps * 10, WSeqIOPS: 5000, WRandIOPS: 5000},
			QoS{Enable: true, User: true, WPct: 99, WLat: 10000, Min: 1, Max: 100}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Rebase(DiskPlan{Disk: "vda", QoS: qos, Model: c.model}, c.carried)
			if (got.Model == nil) != (c.wantModel == nil) || got.Model != nil && *got.Model != *c.wantModel {
				t.Errorf("model %+v, want %+v", got.Model, c.wantModel)
			}
			if d := got.QoS.Min - c.wantQoS.Min; d > 1e-9 || d < -1e-9 {
				t.Errorf("QoS min %v, want %v", got.QoS.Min, c.wantQoS.Min)
			}
			got.QoS.Min = c.wantQoS.Min
			if d := got.QoS.Max - c.wantQoS.Max; d > 1e-9 || d < -1e-9 {
				t.Errorf("QoS max %v, want %v", got.QoS.Max, c.wantQoS.Max)
			}
			got.QoS.Max = c.wantQoS.Max
			if got.QoS != c.wantQoS {
				t.Errorf("QoS %+v, want %+v", got.QoS, c.wantQoS)
			}
			if err := got.QoS.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
	// The plan it was given is not changed under it.
	m := Seed
	p := DiskPlan{Disk: "vda", QoS: qos, Model: &m}
	Rebase(p, 200)
	if *p.Model != Seed || p.QoS != qos {
		t.Errorf("Rebase changed its argument: %+v", p)
	}
}

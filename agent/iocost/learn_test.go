package iocost

import (
	"testing"
	"time"
)

func TestParseVrates(t *testing.T) {
	text := "8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0 cost.vrate=31.20 cost.usage=5\n" +
		"8:16 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n" + // iocost off there
		"253:0 cost.vrate=bogus\n\n"
	got := ParseVrates(text)
	if len(got) != 1 || got["8:0"] != 31.2 {
		t.Errorf("ParseVrates = %v, want only 8:0 at 31.2", got)
	}
}

func TestScale(t *testing.T) {
	m := Model{User: true, RBps: 20_000_000, RSeqIOPS: 500, RRandIOPS: 500, WBps: 20_000_000, WSeqIOPS: 500, WRandIOPS: 3}
	got := m.Scale(30)
	want := Model{User: true, RBps: 6_000_000, RSeqIOPS: 150, RRandIOPS: 150, WBps: 6_000_000, WSeqIOPS: 150, WRandIOPS: 1}
	if got != want {
		t.Errorf("Scale(30) = %+v, want %+v (a parameter never 0)", got, want)
	}
}

func TestSeedShape(t *testing.T) {
	// etcd's 500 IOPS at a gp3 volume's bytes per I/O (125 MiB / 3000).
	if Seed.WSeqIOPS != 500 || Seed.WBps != 500*43690 {
		t.Errorf("Seed = %+v", Seed)
	}
}

func TestLearn(t *testing.T) {
	cases := []struct {
		name   string
		vrate  float64
		window time.Duration
		ok     bool
		want   uint64 // wseqiops
	}{
		{"a disk at a third of the seed", 31.2, time.Minute, true, 156},
		{"one 8x the seed", 800, time.Minute, true, 4000},
		{"a window too short", 31.2, MinLearnWindow - time.Second, false, 0},
		{"no vrate", 0, time.Minute, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, ok := Learn(Seed, c.vrate, c.window)
			if ok != c.ok || m.WSeqIOPS != c.want {
				t.Errorf("Learn = %+v, %v; want wseqiops %d, %v", m, ok, c.want, c.ok)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	given := Model{User: true, RBps: 1, RSeqIOPS: 1, RRandIOPS: 1, WBps: 1, WSeqIOPS: 1, WRandIOPS: 1}
	set := LearnedSet{Disks: []Learned{
		{ID: "serial:a/100", Disk: "vda", Model: Seed.Scale(200).Params()},
		{ID: "serial:b/100", Disk: "vdb", Model: "rbps=oops"},
	}}
	cases := []struct {
		name  string
		given *Model
		id    string
		want  Model
		src   Source
		err   bool
	}{
		{"the operator's model wins", &given, "serial:a/100", given, Configured, false},
		{"the learned one", nil, "serial:a/100", Seed.Scale(200), LearnedModel, false},
		{"a disk of another size learns again", nil, "serial:a/200", Seed, Seeded, false},
		{"nothing known", nil, "", Seed, Seeded, false},
		{"a damaged entry: the seed, and why", nil, "serial:b/100", Seed, Seeded, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, src, err := Plan(c.given, set, c.id)
			if m != c.want || src != c.src || (err != nil) != c.err {
				t.Errorf("Plan = %+v, %v, %v; want %+v, %v, error %v", m, src, err, c.want, c.src, c.err)
			}
		})
	}
}

package guard

import (
	"testing"
	"time"
)

func TestLiveStep(t *testing.T) {
	at := time.Unix(100, 0)
	base := Baseline{SignalWALFsync: {P99: 10 * time.Millisecond}}
	wal := func(p99 time.Duration, n uint64) Sample {
		return Sample{Latency: map[string]Stat{SignalWALFsync: {P99: p99, N: n}}}
	}
	long := wal(12*time.Millisecond, 300)
	empty := wal(0, 0)
	for _, tc := range []struct {
		name     string
		prev     Live
		frozen   bool
		s        Sample
		long     *Sample
		wantP99  time.Duration
		wantBase time.Duration
	}{
		{"short sample alone", Live{}, false, wal(30*time.Millisecond, 5), nil, 30 * time.Millisecond, 10 * time.Millisecond},
		{"the long window preferred", Live{}, true, wal(30*time.Millisecond, 5), &long, 12 * time.Millisecond, 10 * time.Millisecond},
		{"an empty long window is not", Live{}, false, wal(30*time.Millisecond, 5), &empty, 30 * time.Millisecond, 10 * time.Millisecond},
		{"no fsyncs keep the last p99", Live{WALP99: 7 * time.Millisecond}, false, empty, &empty, 7 * time.Millisecond, 10 * time.Millisecond},
		{"no etcd scraped", Live{}, false, Sample{}, nil, 0, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.prev
			liveStep(&l, at, tc.frozen, 42, base, tc.s, tc.long)
			if !l.Guarded || !l.At.Equal(at) || l.Braking != tc.frozen || l.Rate != 42 || l.WALP99 != tc.wantP99 || l.WALBaseline != tc.wantBase {
				t.Errorf("got %+v, want p99 %s baseline %s braking %v", l, tc.wantP99, tc.wantBase, tc.frozen)
			}
		})
	}
}

func TestBoardOpenStepClose(t *testing.T) {
	var nilBoard *Board
	nilBoard.Open("x", time.Time{})
	nilBoard.step(func(l *Live) { l.Braking = true })
	if _, ok := nilBoard.Live(); ok {
		t.Error("a nil board reads a window")
	}
	b := &Board{}
	b.step(func(l *Live) { l.Braking = true })
	if _, ok := b.Live(); ok {
		t.Error("a step with no window open opened one")
	}
	b.Open("iocost (vda learned)", time.Unix(1, 0))
	b.step(func(l *Live) { l.Braking = true })
	if l, ok := b.Live(); !ok || !l.Braking || l.Pacing != "iocost (vda learned)" {
		t.Errorf("open board: %+v %v", l, ok)
	}
	b.Close()
	if _, ok := b.Live(); ok {
		t.Error("closed board reads a window")
	}
}

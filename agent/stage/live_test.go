package stage

import (
	"context"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/systemd"
)

// TestWindowShowsTheBrakeLive: while the window is open the board says
// how it paces and, from the running guard, that the brake holds the
// units with etcd's WAL p99 against the baseline; closed with the window.
func TestWindowShowsTheBrakeLive(t *testing.T) {
	e := newEnv(t)
	board := &guard.Board{}
	e.opts.Guard = GuardOptions{
		Enabled: true,
		Options: guard.Options{LearnFor: -1, Interval: 20 * time.Millisecond, Window: 20 * time.Millisecond,
			Baseline: guard.Baseline{"wal_fsync": {P99: 5 * time.Millisecond, Median: 2 * time.Millisecond}},
			Config:   guard.Config{MinFreeze: 200 * time.Millisecond, MaxFreeze: 400 * time.Millisecond},
			Board:    board},
		Source: &slowEtcd{},
	}
	s := e.stager(t, nil)
	var seen guard.Live
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if l, ok := board.Live(); ok && l.Braking {
				seen = l
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if !seen.Braking || !seen.Guarded || seen.Pacing != rep.Pacing || seen.Pacing == "" {
		t.Errorf("live while open: %+v (report's pacing %q)", seen, rep.Pacing)
	}
	if seen.WALBaseline != 5*time.Millisecond || seen.WALP99 <= seen.WALBaseline {
		t.Errorf("live etcd WAL p99 %s against %s, want above the 5ms baseline", seen.WALP99, seen.WALBaseline)
	}
	if l, ok := board.Live(); ok {
		t.Errorf("board still open after the window: %+v", l)
	}
}

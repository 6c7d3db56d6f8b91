package stage

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iosched"
	"github.com/update-agent/update-agent/agent/systemd"
)

func TestRateFloor(t *testing.T) {
	xfs := iosched.Filesystem{Path: "/sysroot", Type: "xfs"}
	ext4 := iosched.Filesystem{Path: "/var/lib/etcd", Type: "ext4"}
	wb := iosched.Filesystem{Path: "/srv", Type: "ext4", Options: []string{"rw", "data=writeback"}}
	tests := []struct {
		name    string
		rc      guard.RateConfig
		fss     []iosched.Filesystem
		wantMin uint64 // 0: unchanged
		ordered int
	}{
		{"XFS: unchanged", guard.RateConfig{}, []iosched.Filesystem{xfs}, 0, 0},
		{"ext4 writeback: unchanged", guard.RateConfig{}, []iosched.Filesystem{xfs, wb}, 0, 0},
		{"ext4 ordered beside XFS: the start rate", guard.RateConfig{}, []iosched.Filesystem{xfs, ext4}, 4_000_000, 1},
		{"a configured start", guard.RateConfig{Start: 10_000_000}, []iosched.Filesystem{ext4}, 10_000_000, 1},
		{"a minimum above the start stays", guard.RateConfig{Min: 6_000_000, Start: 5_000_000}, []iosched.Filesystem{ext4}, 6_000_000, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc, ordered := RateFloor(tc.rc, tc.fss)
			want := tc.rc
			if tc.wantMin > 0 {
				want.Min = tc.wantMin
			}
			if rc != want || len(ordered) != tc.ordered {
				t.Errorf("got %+v (%d ordered), want %+v (%d)", rc, len(ordered), want, tc.ordered)
			}
			if err := rc.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// On ext4 the rate controller cuts (etcd stays slow) but never below the
// start rate: the staging unit's io.max stays at 4 MB/s.
func TestRunAutoWriteRateOnAnOrderedJournal(t *testing.T) {
	e := newEnv(t)
	e.sched.fs = []iosched.Filesystem{{MountPoint: "/var", Type: "ext4", Options: []string{"rw"}}}
	ioMax := e.autoRate(t)
	e.opts.WriteRate = guard.RateConfig{Cooldown: 40 * time.Millisecond}
	s := e.stager(t, fakeDaemon{idle: false})
	seen := map[string]bool{}
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		// Long enough for several cuts at a 40 ms cooldown.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if b, _ := os.ReadFile(ioMax); len(b) > 0 {
				seen[string(b)] = true
			}
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || !seen["252:16 wbps=4000000"] {
		t.Errorf("staging unit's io.max took %v, want only the start rate 252:16 wbps=4000000", seen)
	}
	if rep.Guard.Rate != 4_000_000 || rep.Guard.RateCuts < 2 {
		t.Errorf("rate %d after %d cuts, want 4 MB/s after several", rep.Guard.Rate, rep.Guard.RateCuts)
	}
	e.assertUndone(t)
}

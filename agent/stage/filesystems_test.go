package stage

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iosched"
	"github.com/update-agent/update-agent/agent/systemd"
)

// With the defaults the rate controller cuts (etcd stays slow) but never
// below the start rate: the staging unit's io.max stays at 4 MB/s. The
// journal names the staging paths' file systems.
func TestRunAutoWriteRateNeverBelowTheStart(t *testing.T) {
	e := newEnv(t)
	e.sched.fs = []iosched.Filesystem{{MountPoint: "/var", Type: "ext4", Options: []string{"rw"}}}
	ioMax := e.autoRate(t)
	e.opts.WriteRate = guard.RateConfig{Cooldown: 40 * time.Millisecond}
	var logs bytes.Buffer
	e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
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
	if want := `file_systems="[/var (ext4 data=ordered at /var)]" journal_orders_data=true`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs.String())
	}
	e.assertUndone(t)
}

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

// With the defaults the rate controller cuts (etcd stays slow) but, with
// nothing measured of the disk (the fake sysfs has no disk statistics),
// never below the start rate: the staging unit's io.max stays at 4 MB/s
// and its IOPS with it. The
// journal names the staging paths' file systems.
func TestRunAutoWriteRateNeverBelowTheStart(t *testing.T) {
	e := newEnv(t)
	e.sched.fs = []iosched.Filesystem{{MountPoint: "/var", Type: "xfs", Options: []string{"rw"}}}
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
	if len(seen) != 1 || !seen["252:16 wbps=4000000 wiops=244"] {
		t.Errorf("staging unit's io.max took %v, want only the start rate 252:16 wbps=4000000 wiops=244", seen)
	}
	if rep.Guard.Rate != 4_000_000 || rep.Guard.RateCuts < 2 {
		t.Errorf("rate %d after %d cuts, want 4 MB/s after several", rep.Guard.Rate, rep.Guard.RateCuts)
	}
	if want := `file_systems="[/var (xfs at /var)]" journal_orders_data=false`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs.String())
	}
	e.assertUndone(t)
}

// On ext4's ordered journal "auto" sets no cap on either unit (etcd's
// fsync would wait for the capped write-back), and says so; the guard
// still runs (its freezes are the brake) and the memory bound stays.
func TestRunAutoWriteRateOnOrderedJournalSetsNoCap(t *testing.T) {
	e := newEnv(t)
	e.sched.fs = []iosched.Filesystem{{MountPoint: "/var", Type: "ext4", Options: []string{"rw"}}}
	ioMax := e.autoRate(t)
	var logs bytes.Buffer
	e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	s := e.stager(t, fakeDaemon{idle: false})
	var capped string
	e.sys.finish = func(ctx context.Context) (systemd.UnitStatus, error) {
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if b, _ := os.ReadFile(ioMax); len(b) > 0 {
				capped = string(b)
			}
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := s.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if capped != "" || rep.Guard.Rate != 0 || rep.Guard.RateCuts != 0 {
		t.Errorf("io.max %q, rate %d, %d cuts: want no cap at all", capped, rep.Guard.Rate, rep.Guard.RateCuts)
	}
	if n := e.sys.called("SetRuntime " + daemonUnit + " IOWriteBandwidthMax"); n != 0 {
		t.Errorf("the daemon's write rate was set %d times: %v", n, e.sys.calls)
	}
	if !rep.Guarded {
		t.Error("the guard did not run")
	}
	for _, want := range []string{`journal_orders_data=true`, `on a journal that orders data: no cap`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	e.assertUndone(t)
}

func TestWriteRateMode(t *testing.T) {
	for _, c := range []struct {
		auto           bool
		fixed          uint64
		guarded, order bool
		iocost         bool
		want           writeRate
	}{
		{auto: true, guarded: true, want: rateLoop},
		{auto: true, guarded: true, order: true, want: rateNone},
		{auto: true, want: rateStart},
		{auto: true, order: true, want: rateNone},
		{fixed: 5_000_000, guarded: true, want: rateFixed},
		{fixed: 5_000_000, guarded: true, order: true, want: rateFixed}, // the operator's cap stays
		{guarded: true, want: rateNone},
		{auto: true, guarded: true, iocost: true, want: rateNone},        // the kernel paces
		{fixed: 5_000_000, guarded: true, iocost: true, want: rateFixed}, // the operator's cap stays
		{auto: true, guarded: true, order: true, iocost: true, want: rateNone},
	} {
		if got := writeRateMode(c.auto, c.fixed, c.guarded, c.order, c.iocost); got != c.want {
			t.Errorf("writeRateMode(auto=%v, fixed=%d, guarded=%v, ordered=%v, iocost=%v) = %d, want %d", c.auto, c.fixed, c.guarded, c.order, c.iocost, got, c.want)
		}
	}
}

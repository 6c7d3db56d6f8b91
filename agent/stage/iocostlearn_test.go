package stage

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/systemd"
)

// learnEnv is iocostEnv with a disk that has a serial and a size, a clock
// the window's length is set on, and the root cgroup's io.stat the kernel
// would show at the window's end.
func (e *env) learnEnv(t *testing.T) (model, ioStat string, window *time.Duration) {
	t.Helper()
	_, model = e.iocostEnv(t, true)
	blk := filepath.Join(e.opts.SysRoot, "block/vdb")
	os.WriteFile(filepath.Join(blk, "serial"), []byte("etcd-disk-1\n"), 0o644)
	os.WriteFile(filepath.Join(blk, "size"), []byte("41943040\n"), 0o644)
	ioStat = filepath.Join(e.opts.SysRoot, "fs/cgroup/io.stat")
	window = new(time.Duration)
	start := time.Date(2026, 12, 6, 15, 0, 0, 0, time.UTC)
	calls := 0
	// The first reading starts the window, the next ends it.
	e.now = func() time.Time {
		calls++
		if calls%2 == 0 {
			return start.Add(*window)
		}
		return start
	}
	return model, ioStat, window
}

// vrateInWindow has the root's io.stat show iocost at 100 % when the
// window starts (a first enable in this boot) and at vrate once staging
// runs, as the kernel moves it.
func (e *env) vrateInWindow(ioStat, vrate string) {
	line := func(v string) []byte {
		return []byte("252:16 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0 cost.vrate=" + v + " cost.usage=7\n")
	}
	os.WriteFile(ioStat, line("100.00"), 0o644)
	e.sys.onStart = func(string) { os.WriteFile(ioStat, line(vrate), 0o644) }
}

func (e *env) learned(t *testing.T) iocost.LearnedSet {
	t.Helper()
	var set iocost.LearnedSet
	if _, err := atomicfile.ReadJSON(filepath.Join(e.stateDir, "iocost-learned.json"), &set); err != nil {
		t.Fatal(err)
	}
	return set
}

// A disk nobody gave a model for starts from the seed with room to climb;
// the model times the vrate the kernel ended the window at is kept by the
// disk's serial and size, and the next window starts from it with the
// configured bounds and learns on.
func TestIOCostLearnsTheDisk(t *testing.T) {
	e := newEnv(t)
	model, ioStat, window := e.learnEnv(t)
	var logs lockedBuffer
	e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	seed := "252:16 " + strings.TrimPrefix(iocost.Seed.Line("252:16"), "252:16 ")
	learned1 := iocost.Seed.Scale(31.2)
	learned2 := learned1.Scale(120)
	steps := []struct {
		window    time.Duration
		vrate     string
		wantModel string // in force during the window
		wantQoS   string
		want      iocost.Model // kept after it
		windows   int
		pacing    string
	}{
		{45 * time.Second, "31.20", seed, windowQoS, learned1, 1, "iocost (vdb seed)"},
		{45 * time.Second, "120.00", learned1.Line("252:16"), windowQoS, learned2, 2, "iocost (vdb learned)"},
		// Too short to say anything: the model stays.
		{10 * time.Second, "400.00", learned2.Line("252:16"), windowQoS, learned2, 2, "iocost (vdb learned)"},
	}
	for i, st := range steps {
		*window = st.window
		e.vrateInWindow(ioStat, st.vrate)
		var inWindow string
		e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
			inWindow = readString(t, model)
			e.assertIOCostWindow(t, filepath.Join(e.opts.SysRoot, "fs/cgroup/io.cost.qos"), st.wantQoS)
			return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
		}
		rep, err := e.stager(t, fakeDaemon{idle: false}).Run(context.Background(), argv)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Pacing != st.pacing {
			t.Errorf("window %d: pacing %q, want %q", i+1, rep.Pacing, st.pacing)
		}
		if inWindow != st.wantModel {
			t.Errorf("window %d: io.cost.model %q, want %q", i+1, inWindow, st.wantModel)
		}
		set := e.learned(t)
		if len(set.Disks) != 1 {
			t.Fatalf("window %d: learned %+v, want one disk", i+1, set)
		}
		l := set.Disks[0]
		if l.ID != "serial:etcd-disk-1/41943040" || l.Disk != "vdb" || l.Model != st.want.Params() || l.Windows != st.windows {
			t.Errorf("window %d: learned %+v, want %s after %d windows", i+1, l, st.want.Params(), st.windows)
		}
	}
	// The journal gives the line to pin.
	if want := `model="vdb ` + learned1.Params() + `"`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs.String())
	}
	if !strings.Contains(logs.String(), "window too short to learn") {
		t.Errorf("log does not say the short window taught nothing:\n%s", logs.String())
	}
}

// The kernel keeps a disk's vrate across enables in one boot: a window
// that finds it at 200 % runs its model at half, with the bounds twice
// the configured ones, so the kernel's rate starts at the plan's; the
// model learned is what the window ran times where the kernel ended (not
// the seed times it, which would count the first 200 % again).
func TestIOCostRebasesOnTheCarriedVrate(t *testing.T) {
	e := newEnv(t)
	model, ioStat, window := e.learnEnv(t)
	*window = time.Minute
	var logs lockedBuffer
	e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	line := func(v string) []byte {
		return []byte("252:16 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0 cost.vrate=" + v + " cost.usage=7\n")
	}
	os.WriteFile(ioStat, line("200.00"), 0o644)
	e.sys.onStart = func(string) { os.WriteFile(ioStat, line("250.00"), 0o644) }
	half := iocost.Seed.Scale(50)
	var inWindow string
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		inWindow = readString(t, model)
		e.assertIOCostWindow(t, filepath.Join(e.opts.SysRoot, "fs/cgroup/io.cost.qos"),
			strings.Replace(windowQoS, "min=5.00 max=150.00", "min=10.00 max=300.00", 1))
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	if _, err := e.stager(t, fakeDaemon{idle: false}).Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	if want := half.Line("252:16"); inWindow != want {
		t.Errorf("io.cost.model in the window %q, want the seed at half %q", inWindow, want)
	}
	if set := e.learned(t); len(set.Disks) != 1 || set.Disks[0].Model != half.Scale(250).Params() {
		t.Errorf("learned %+v, want %s", set, half.Scale(250).Params())
	}
	if want := `carried_vrate_pct=200`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs.String())
	}
}

// An operator's model is theirs: the window runs it with the configured
// bounds and keeps nothing; a kernel that shows no vrate teaches nothing.
func TestIOCostLearnsNothingFrom(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given bool
		stat  string
	}{
		{"an operator's model", true, "252:16 rbytes=1 cost.vrate=50.00\n"},
		{"no vrate in io.stat", false, "252:16 rbytes=1 wbytes=2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			_, ioStat, window := e.learnEnv(t)
			*window = time.Minute
			os.WriteFile(ioStat, []byte(tc.stat), 0o644)
			if tc.given {
				_, m, _ := iocost.ParseDiskModel("vdb rbps=1000000 rseqiops=100 rrandiops=100 wbps=1000000 wseqiops=100 wrandiops=100")
				e.opts.IOCost.Models = map[string]iocost.Model{"vdb": m}
			}
			if _, err := e.stager(t, fakeDaemon{idle: false}).Run(context.Background(), argv); err != nil {
				t.Fatal(err)
			}
			if set := e.learned(t); len(set.Disks) != 0 {
				t.Errorf("learned %+v", set)
			}
		})
	}
}

func TestPacingSummary(t *testing.T) {
	cost := &iocostWindow{plans: []iocost.DiskPlan{{Disk: "vda", Source: iocost.Configured}, {Disk: "vdb", Source: iocost.Seeded}}}
	for _, c := range []struct {
		mode    writeRate
		cost    *iocostWindow
		ordered bool
		want    string
	}{
		{rateNone, cost, true, "iocost (vda given, vdb seed)"},
		{rateLoop, nil, false, "write rate loop"},
		{rateFixed, nil, false, "fixed write cap"},
		{rateStart, nil, false, "write cap at the start rate (no guard)"},
		{rateNone, nil, true, "no write cap (journal orders data)"},
		{rateNone, nil, false, "no write cap"},
	} {
		if got := pacingSummary(c.mode, c.cost, c.ordered); got != c.want {
			t.Errorf("pacingSummary(%v, %v, %v) = %q, want %q", c.mode, c.cost != nil, c.ordered, got, c.want)
		}
	}
}

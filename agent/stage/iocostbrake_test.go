package stage

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/systemd"
)

// etcd far over the brake's limit under iocost (guard.iocost_brake): the
// window's model is cut down (here to the least scale the test allows, a
// quarter) with the QoS's vrate bound brought down to the vrate the
// kernel had (80 %), the model learned is the cut one times the vrate,
// the journal says where the window ended, and the restore puts back
// what was there before the window.
func TestModelBrakeScalesTheWindowsModel(t *testing.T) {
	e := newEnv(t)
	model, ioStat, window := e.learnEnv(t)
	*window = time.Minute
	var logs lockedBuffer
	e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	e.vrateInWindow(ioStat, "80.00")
	e.opts.Guard.IOCostBrake = true
	e.opts.Guard.Options.Baseline = guard.Baseline{"wal_fsync": {P99: 8 * time.Millisecond, Median: 2 * time.Millisecond}}
	e.opts.Guard.Options.Model.Config = guard.ModelConfig{Cooldown: 40 * time.Millisecond, MinScale: 0.25}
	qos := filepath.Join(e.opts.SysRoot, "fs/cgroup/io.cost.qos")
	cut := iocost.Seed.Scale(25)
	var inWindow, qosInWindow string
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		// The controller writes the model, then the QoS, each a truncate
		// and a write on these plain files (one atomic write on cgroupfs):
		// wait for both, or a read between the two sees an empty QoS.
		deadline := time.Now().Add(10 * time.Second)
		for {
			inWindow, qosInWindow = readString(t, model), readString(t, qos)
			if inWindow == cut.Line("252:16") && strings.HasSuffix(qosInWindow, " min=5.00 max=80.00") || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := e.stager(t, fakeDaemon{idle: false}).Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if inWindow != cut.Line("252:16") {
		t.Fatalf("io.cost.model in the window %q, want the seed at a quarter %q", inWindow, cut.Line("252:16"))
	}
	if !strings.HasSuffix(qosInWindow, " min=5.00 max=80.00") {
		t.Errorf("io.cost.qos in the window %q, want the vrate bound at the kernel's 80 %%", qosInWindow)
	}
	if rep.Guard.ModelCuts != 2 || rep.Guard.ModelScale != 0.25 {
		t.Errorf("guard stats %+v, want 2 model cuts ending at 0.25", rep.Guard)
	}
	if set := e.learned(t); len(set.Disks) != 1 || set.Disks[0].Model != cut.Scale(80).Params() {
		t.Errorf("learned %+v, want the cut model times the vrate: %s", set, cut.Scale(80).Params())
	}
	for _, want := range []string{`msg="iocost model scale" model_scale=0.5`, `msg="iocost at the window's end" disk=vdb model_source=seed vrate_pct=80 model_scale=0.25`,
		`msg="iocost vrate over the window" disk=vdb min_pct=80 mean_pct=80 max_pct=80 end_pct=80`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	e.assertIOCostUndone(t, qos, model)
}

// Off (guard.iocost_brake = false), the same etcd leaves the model alone.
func TestModelBrakeOff(t *testing.T) {
	e := newEnv(t)
	model, ioStat, window := e.learnEnv(t)
	*window = time.Minute
	e.vrateInWindow(ioStat, "80.00")
	e.opts.Guard.Options.Baseline = guard.Baseline{"wal_fsync": {P99: 8 * time.Millisecond, Median: 2 * time.Millisecond}}
	e.opts.Guard.Options.Model.Config = guard.ModelConfig{Cooldown: 40 * time.Millisecond}
	var inWindow string
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		// Enough of the guard's 20 ms steps for a brake that were on.
		time.Sleep(300 * time.Millisecond)
		inWindow = readString(t, model)
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := e.stager(t, fakeDaemon{idle: false}).Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if seed := iocost.Seed.Line("252:16"); inWindow != seed || rep.Guard.ModelCuts != 0 {
		t.Errorf("io.cost.model %q, %d cuts with the brake off; want the seed %q, none", inWindow, rep.Guard.ModelCuts, seed)
	}
}

// The brake's steps on the files: a cut scales the model and brings the
// vrate bound down to the kernel's vrate; a raise scales the model alone
// (raising the bound with it took the effective rate up 1.56x a step in
// make bench); the bound never goes back up within the window, not even
// at scale 1.
func TestScaleIOCostSteps(t *testing.T) {
	e := newEnv(t)
	model, ioStat, _ := e.learnEnv(t)
	qosFile := filepath.Join(e.opts.SysRoot, "fs/cgroup/io.cost.qos")
	s := e.stager(t, nil)
	seed := iocost.Seed
	w := &iocostWindow{disks: []string{"vdb"}, plans: []iocost.DiskPlan{{Disk: "vdb", Model: &seed, Source: iocost.Seeded,
		QoS: iocost.QoS{Enable: true, User: true, RPct: 99, WPct: 99, RLat: 20000, WLat: 20000, Min: 5, Max: 1000}}}}
	for _, st := range []struct {
		scale float64
		vrate string
		max   string
	}{
		{0.5, "300.00", "max=300.00"},   // a cut: bound to the vrate
		{0.625, "300.00", "max=300.00"}, // a raise: the model alone
		{0.25, "420.00", "max=300.00"},  // a cut with vrate above the bound: not raised
		{1, "100.00", "max=300.00"},     // back at 1: the bound stays
	} {
		os.WriteFile(ioStat, []byte("252:16 rbytes=1 cost.vrate="+st.vrate+"\n"), 0o644)
		if err := s.scaleIOCost(w, st.scale); err != nil {
			t.Fatal(err)
		}
		if got, want := readString(t, model), seed.Scale(st.scale*100).Line("252:16"); got != want {
			t.Errorf("scale %g: io.cost.model %q, want %q", st.scale, got, want)
		}
		if got := readString(t, qosFile); !strings.HasSuffix(got, st.max) {
			t.Errorf("scale %g, vrate %s: io.cost.qos %q, want %s", st.scale, st.vrate, got, st.max)
		}
	}
	if err := s.iocost.Restore(); err != nil {
		t.Fatal(err)
	}
	if q, m := readString(t, qosFile), readString(t, model); q != "252:16 enable=0 ctrl=auto" || m != "252:16 ctrl=auto" {
		t.Errorf("after the restore: io.cost.qos %q, io.cost.model %q; want what was there before the first scaling", q, m)
	}
}

// The brake reads iocost's own books: with the other tenants using 80 %
// of the budget (the root's cost.usage growing 0.8 µs a µs, none of it
// the stager's), a cut would throttle them, etcd among them, so etcd far
// over its limit cuts nothing, and the journal says why. (Cut anyway,
// the bench's defaults went to 1/16 in 25 s with etcd and the fio job
// at 115 % of the budget and staging stalled.)
func TestModelBrakeLeavesTheOtherTenantsTheirShare(t *testing.T) {
	e := newEnv(t)
	model, ioStat, window := e.learnEnv(t)
	*window = time.Minute
	var logs lockedBuffer
	e.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	e.opts.Guard.IOCostBrake = true
	e.opts.Guard.Options.Baseline = guard.Baseline{"wal_fsync": {P99: 8 * time.Millisecond, Median: 2 * time.Millisecond}}
	e.opts.Guard.Options.Model.Config = guard.ModelConfig{Cooldown: 40 * time.Millisecond, MinScale: 0.25, BooksSpan: 100 * time.Millisecond}
	start := time.Now()
	f, err := os.OpenFile(ioStat, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	books := func() {
		// In place, fixed width, one write: the kernel's reads never see
		// half a file, nor must the guard's here.
		used := 1_000_000_000 + time.Since(start).Microseconds()*8/10
		f.WriteAt([]byte(fmt.Sprintf("252:16 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0 cost.vrate=100.00 cost.usage=%d\n", used)), 0)
	}
	books()
	// The books kept as the kernel keeps them, from before the window
	// opens to its end.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				books()
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	var inWindow string
	e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
		// The guard's 20 ms steps, over several of the brake's 40 ms
		// cooldowns.
		time.Sleep(400 * time.Millisecond)
		inWindow = readString(t, model)
		return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
	}
	rep, err := e.stager(t, fakeDaemon{idle: false}).Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	if seed := iocost.Seed.Line("252:16"); inWindow != seed || rep.Guard.ModelCuts != 0 {
		t.Errorf("io.cost.model %q, %d cuts with the other tenants at 80 %% of the budget; want the seed %q, none:\n%s", inWindow, rep.Guard.ModelCuts, seed, logs.String())
	}
	if want := `reason="over the limit, but a cut would leave the other tenants less than they use: holding" others_budget_share=`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs.String())
	}
}

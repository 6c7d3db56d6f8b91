package stage

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/iosched"
	"github.com/update-agent/update-agent/agent/systemd"
)

// autoPacing is the defaults' staging.iocost = "auto" and memory_high =
// "auto" over iocostEnv's kernel, with the staging paths on fs, and
// rpm-ostreed holding 350 MiB of its own memory.
func (e *env) autoPacing(t *testing.T, fs string) (qos string, logs *lockedBuffer) {
	t.Helper()
	qos, _ = e.iocostEnv(t, true)
	e.opts.IOCost.Mode, e.opts.IOCost.EtcdIOWeight = iocost.Auto, 0
	e.opts.Policy.MemoryHigh, e.opts.MemoryHighAuto = 0, true
	e.sched.fs = []iosched.Filesystem{{MountPoint: "/var", Type: fs, Options: []string{"rw"}}}
	writeCgroup(t, e.opts.SysRoot, daemonUnit, 400*mib, 50*mib)
	logs = &lockedBuffer{}
	e.opts.Log = slog.New(slog.NewTextHandler(logs, nil))
	return qos, logs
}

// waitDaemonMemoryHigh polls the daemon's MemoryHigh until it is want
// (the pacer's first step) or 5 s pass, and returns the last seen.
func (e *env) waitDaemonMemoryHigh(want uint64) uint64 {
	var got uint64
	for end := time.Now().Add(5 * time.Second); got != want && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		e.sys.mu.Lock()
		got = e.sys.units[daemonUnit].props["MemoryHigh"].Uint
		e.sys.mu.Unlock()
	}
	return got
}

// "auto" follows the journal: on ext4's ordered journal iocost learns the
// disk (the seed's QoS) with an 8M page cache bound on the staging unit
// and rpm-ostreed (x1.80 on ext4's small disk) and etcd at its own
// weight; on XFS no iocost, the rate loop, and 32M (learning with 8M went
// x4.07 there, the loop x2.38), and where a model puts iocost on XFS etcd
// is raised (x13 at its own weight there).
func TestRunAutoPacingFollowsTheJournal(t *testing.T) {
	const unset = 0 // the fake's IOWeight of a unit never given one
	for _, tc := range []struct {
		name, fs   string
		model      bool
		iocost     bool
		allowance  uint64
		etcdWeight uint64
		pacing     string
		log        string
	}{
		{"ext4", "ext4", false, true, 8 * mib, unset, "iocost (vdb seed)",
			`msg="pacing chosen" iocost=auto iocost_as=true journal_orders_data=true pacing="iocost on vdb (given, learned or seed model)" memory_high=8M memory_high_why="iocost on an ordered journal"`},
		{"xfs", "xfs", false, false, 32 * mib, unset, "write rate loop",
			`msg="pacing chosen" iocost=auto iocost_as=with-model journal_orders_data=false pacing="write rate loop or cap" memory_high=32M`},
		{"xfs with a model", "xfs", true, true, 32 * mib, 10000, "iocost (vdb given)",
			`msg="pacing chosen" iocost=auto iocost_as=with-model journal_orders_data=false pacing="iocost on vdb (given models)" memory_high=32M`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			qos, logs := e.autoPacing(t, tc.fs)
			if tc.model {
				d, m, err := iocost.ParseDiskModel(vdbModel)
				if err != nil {
					t.Fatal(err)
				}
				e.opts.IOCost.Models = map[string]iocost.Model{d: m}
			}
			s := e.stager(t, fakeDaemon{idle: false})
			var inWindow string
			var staging systemd.Policy
			var daemon, etcd uint64
			e.sys.finish = func(context.Context) (systemd.UnitStatus, error) {
				inWindow = readString(t, qos)
				daemon = e.waitDaemonMemoryHigh(350*mib + tc.allowance)
				e.sys.mu.Lock()
				staging = e.sys.units[stagingUnit].started.Policy
				etcd = e.sys.units[etcdUnit].props["IOWeight"].Uint
				e.sys.mu.Unlock()
				return systemd.UnitStatus{ActiveState: "active", SubState: "exited", Result: "success", ExecMainCode: 1}, nil
			}
			rep, err := s.Run(context.Background(), argv)
			if err != nil {
				t.Fatal(err)
			}
			if rep.IOCost != tc.iocost || rep.Pacing != tc.pacing {
				t.Errorf("iocost %v, pacing %q; want %v, %q", rep.IOCost, rep.Pacing, tc.iocost, tc.pacing)
			}
			if wantQoS := map[bool]string{true: windowQoS, false: ""}[tc.iocost]; !tc.model && inWindow != wantQoS {
				t.Errorf("io.cost.qos in the window %q, want %q", inWindow, wantQoS)
			}
			if etcd != tc.etcdWeight {
				t.Errorf("etcd's IOWeight in the window %d, want %d", etcd, tc.etcdWeight)
			}
			if staging.MemoryHigh != tc.allowance || rep.MemoryHigh != tc.allowance {
				t.Errorf("staging unit's MemoryHigh %d, report's %d; want %d", staging.MemoryHigh, rep.MemoryHigh, tc.allowance)
			}
			if daemon != 350*mib+tc.allowance {
				t.Errorf("daemon MemoryHigh while staging = %d MiB, want %d (350 own + the allowance)", daemon/mib, (350*mib+tc.allowance)/mib)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log lacks %s:\n%s", tc.log, logs.String())
			}
			if n := strings.Count(logs.String(), `msg="pacing chosen"`); n != 1 {
				t.Errorf("pacing chosen logged %d times, want once", n)
			}
			e.assertUndone(t)
		})
	}
}

// A foreign window (companion mode) opens the same way: on an ordered
// journal rpm-ostreed gets the 8M allowance under iocost.
func TestPaceForeignAutoPacing(t *testing.T) {
	e := newEnv(t)
	_, logs := e.autoPacing(t, "ext4")
	s := e.stager(t, nil)
	end := paceForeign(s, context.Background())
	during := e.waitDaemonMemoryHigh(358 * mib)
	rep, err := end()
	if err != nil {
		t.Fatal(err)
	}
	if during != 358*mib || !rep.IOCost || rep.MemoryHigh != 8*mib {
		t.Errorf("daemon MemoryHigh %d MiB, iocost %v, report's bound %d: want 358 (350 own + 8), iocost, 8M", during/mib, rep.IOCost, rep.MemoryHigh)
	}
	if want := `memory_high=8M memory_high_why="iocost on an ordered journal"`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs.String())
	}
	e.assertUndone(t)
}

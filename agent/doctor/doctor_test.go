package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/iosched"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/rpmostree"
)

type fakeEtcd struct {
	probeErr error
	match    etcdmember.Match
	matchErr error
	health   etcdmember.Health
	alarms   []string
	rights   Rights
}

func (f fakeEtcd) Rights(context.Context) (Rights, error) { return f.rights, nil }

func (f fakeEtcd) Probe(context.Context) (string, error) { return "https://10.0.0.11:2379", f.probeErr }
func (f fakeEtcd) Members(context.Context) ([]etcdmember.Member, error) {
	var ms []etcdmember.Member
	for _, m := range f.health.Members {
		ms = append(ms, m.Member)
	}
	return ms, nil
}
func (f fakeEtcd) LocalMatch(context.Context) (etcdmember.Match, error) { return f.match, f.matchErr }
func (f fakeEtcd) Health(context.Context) (etcdmember.Health, error)    { return f.health, nil }
func (f fakeEtcd) Alarms(context.Context) ([]string, error)             { return f.alarms, nil }

type fakeLock []lock.GroupStatus

func (f fakeLock) Status(context.Context) ([]lock.GroupStatus, error) { return f, nil }

type fakeOS struct {
	err    error
	driver *rpmostree.UpdateDriver
	txn    *rpmostree.Transaction
}

func (f fakeOS) Status(context.Context) (*rpmostree.Status, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &rpmostree.Status{Deployments: []rpmostree.Deployment{{Checksum: "abc123", Version: "41.1", Booted: true,
		Origin: "fedora:fedora/x86_64/coreos/stable"}},
		UpdateDriver: f.driver, Transaction: f.txn}, nil
}

type fakeCgroups struct{ err error }

func (f fakeCgroups) UnitCgroup(_ context.Context, unit string) (string, error) {
	return "/sys/fs/cgroup/system.slice/" + unit, f.err
}

func (f fakeCgroups) ProcessCgroup(comm string) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	return "/sys/fs/cgroup/kubepods.slice/crio-" + comm + ".scope", nil
}

type fakeDisks struct{ sched string }

func (fakeDisks) Disks([]string) ([]string, error) { return []string{"vda"}, nil }
func (fakeDisks) Filesystems(paths []string) ([]iosched.Filesystem, error) {
	var out []iosched.Filesystem
	for _, p := range paths {
		out = append(out, iosched.Filesystem{Path: p, MountPoint: "/", Type: "xfs"})
	}
	return out, nil
}
func (fakeDisks) WholeDisks(name string) ([]string, error) { return []string{name}, nil }
func (f fakeDisks) Scheduler(string) (string, []string, error) {
	return f.sched, []string{"mq-deadline", "none"}, nil
}

type fakeMetrics string

func (f fakeMetrics) Fetch(context.Context, string) (io.ReadCloser, error) {
	if f == "" {
		return nil, errors.New("connection refused")
	}
	return io.NopCloser(strings.NewReader(string(f))), nil
}

const walHist = `# TYPE etcd_disk_wal_fsync_duration_seconds histogram
etcd_disk_wal_fsync_duration_seconds_bucket{le="0.001"} 5
etcd_disk_wal_fsync_duration_seconds_bucket{le="+Inf"} 7
etcd_disk_wal_fsync_duration_seconds_sum 0.01
etcd_disk_wal_fsync_duration_seconds_count 7
`

func healthy() etcdmember.Health {
	ms := []etcdmember.MemberHealth{}
	for i, n := range []string{"cp1", "cp2", "cp3"} {
		ms = append(ms, etcdmember.MemberHealth{Member: etcdmember.Member{ID: uint64(i + 1), Name: n},
			Reachable: true, RaftIndex: 100 - uint64(i), RaftTerm: 4, Leader: 2})
	}
	return etcdmember.Summarize(ms)
}

type fakeIO struct {
	costErr    error
	latency    bool
	qos, model string
	learned    map[string]iocost.Learned // by disk
}

func (f fakeIO) IOCost() error            { return f.costErr }
func (f fakeIO) IOLatency() (bool, error) { return f.latency, nil }
func (f fakeIO) InForce(string) (string, string, error) {
	return f.qos, f.model, nil
}

func (f fakeIO) Learned(disk, _ string) (iocost.Learned, bool, error) {
	l, ok := f.learned[disk]
	return l, ok, nil
}

func good() Doctor {
	return Doctor{
		In: Inputs{Endpoints: []string{"https://10.0.0.11:2379"}, MaxLag: 1000, LockEnabled: true, LockGroup: "control-plane",
			LockSlots: 1, GuardEnabled: true, MetricsURL: "http://127.0.0.1:2381/metrics", LocalUnit: "etcd.service",
			StagingPaths: []string{"/sysroot", "/var/lib/etcd"}, Scheduler: "bfq", DriverName: "update-agent", IOCost: iocost.On,
			WriteRateAuto: true, StagingUnit: "update-agent-staging.service", DaemonUnit: "rpm-ostreed.service",
			IOWeight: 10, IOCostIOWeight: 1, IOCostEtcdIOWeight: 10000, IOCostBrake: true, BrakeFactor: 2},
		Etcd: fakeEtcd{health: healthy(), match: etcdmember.Match{Found: true,
			How: "member cp1: peer URL https://10.0.0.11:2380 matches 10.0.0.11 on eth0"}},
		Lock: fakeLock{{Group: "control-plane", Slots: 1, Holders: []lock.EntryStatus{{Record: lock.Record{Node: "cp2"}}}}},
		OS:   fakeOS{}, Cgroups: fakeCgroups{}, Disks: fakeDisks{sched: "mq-deadline"}, Metrics: fakeMetrics(walHist),
		IO: fakeIO{qos: "enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 min=1.00 max=10000.00",
			model: "ctrl=auto model=linear rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6"},
	}
}

func TestReport(t *testing.T) {
	sick := healthy()
	sick.Members[2].Reachable, sick.Members[2].Err = false, "connection refused"
	noLeader := healthy()
	noLeader.LeaderID = 0
	for _, tc := range []struct {
		name   string
		change func(*Doctor)
		want   []string // lines (prefixes) expected in the report
	}{
		{"all good", func(*Doctor) {}, []string{
			"ok    etcd           reachable at https://10.0.0.11:2379, TLS and auth accepted; 3 member(s)",
			"ok    etcd rights    etcd authentication is off: no user or role needed, and any client etcd accepts (this host, a certificate its client CA signed) reads and writes all of etcd",
			"ok    local member   member cp1: peer URL https://10.0.0.11:2380 matches 10.0.0.11 on eth0",
			"ok    leader         cp2 leads (term 4)",
			"ok    member health  3 member(s) healthy (3 voting), raft lag at most 2 (limit 1000)",
			"ok    etcd alarms    none active",
			"ok    etcd metrics   http://127.0.0.1:2381/metrics serves etcd_disk_wal_fsync_duration_seconds (7 fsyncs so far)",
			"ok    etcd cgroup    etcd.local_unit etcd.service runs in /sys/fs/cgroup/system.slice/etcd.service",
			"ok    rpm-ostree     status readable: booted abc123 (41.1)",
			"ok    origin         ostree ref fedora:fedora/x86_64/coreos/stable; updates.source = origin: upgrade --check (a new base commit), staged by deploy revision=",
			"ok    staging disks  /sysroot, /var/lib/etcd on vda: mq-deadline (bfq not offered yet: its module is loaded when staging)",
			"ok    io control     iocost: yes, used while staging; io.latency: no; vda: qos enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 min=1.00 max=10000.00; model ctrl=auto model=linear rbps=1",
			"ok    reboot lock    group control-plane: 1 of 1 slot(s) held, 0 waiting; holders cp2",
		}},
		{"etcd unreachable skips the member checks", func(d *Doctor) {
			d.Etcd = fakeEtcd{probeErr: errors.New("no endpoint accepted a status request: https://10.0.0.11:2379: context deadline exceeded")}
		}, []string{
			"FAIL  etcd           no endpoint accepted a status request: https://10.0.0.11:2379: context deadline exceeded",
			"SKIP  etcd rights    not checked: etcd did not answer",
			"SKIP  local member   not checked: etcd did not answer",
			"SKIP  leader         not checked: etcd did not answer",
			"SKIP  member health  not checked: etcd did not answer",
			"SKIP  etcd alarms    not checked: etcd did not answer",
			"ok    rpm-ostree",
			"SKIP  reboot lock    not checked: etcd did not answer",
		}},
		{"member host matching no member", func(d *Doctor) {
			d.Etcd = fakeEtcd{health: healthy(), matchErr: errors.New("etcd.local_unit = etcd.service says this host runs an etcd member, but ...")}
		}, []string{"FAIL  local member   etcd.local_unit = etcd.service says"}},
		{"worker", func(d *Doctor) {
			d.Etcd = fakeEtcd{health: healthy(), match: etcdmember.Match{How: "a worker: no etcd member's ..."}}
		}, []string{"ok    local member   a worker: no etcd member's ..."}},
		{"unhealthy member, no leader, alarm", func(d *Doctor) {
			d.Etcd = fakeEtcd{health: sick, alarms: []string{"cp3: NOSPACE"}}
		}, []string{
			"WAIT  member health  1 of 3 member(s) unhealthy: member cp3 unreachable: connection refused",
			"WAIT  etcd alarms    active: cp3: NOSPACE",
		}},
		{"no leader", func(d *Doctor) { d.Etcd = fakeEtcd{health: noLeader} },
			[]string{"WAIT  leader         no leader"}},
		{"metrics without etcd's histogram", func(d *Doctor) { d.Metrics = fakeMetrics("# TYPE up gauge\nup 1\n") },
			[]string{"FAIL  etcd metrics   guard.metrics_url http://127.0.0.1:2381/metrics answers without etcd's etcd_disk_wal_fsync_duration_seconds histogram"}},
		{"metrics not answering", func(d *Doctor) { d.Metrics = fakeMetrics("") },
			[]string{"FAIL  etcd metrics   guard.metrics_url http://127.0.0.1:2381/metrics: connection refused"}},
		{"no metrics url", func(d *Doctor) { d.In.MetricsURL = "" },
			[]string{`ok    etcd metrics   guard.metrics_url = "": the guard paces on kernel signals only`}},
		{"unit without cgroup", func(d *Doctor) {
			d.Cgroups = fakeCgroups{err: errors.New("systemd has no cgroup for it: is it running?")}
		},
			[]string{"FAIL  etcd cgroup    etcd.local_unit etcd.service: systemd has no cgroup for it: is it running?"}},
		{"member run by the kubelet", func(d *Doctor) { d.In.LocalUnit, d.In.LocalProcess = "", "etcd" },
			[]string{"ok    etcd cgroup    etcd.local_process etcd runs in /sys/fs/cgroup/kubepods.slice/crio-etcd.scope"}},
		{"member process not running", func(d *Doctor) {
			d.In.LocalUnit, d.In.LocalProcess = "", "etcd"
			d.Cgroups = fakeCgroups{err: errors.New(`no process named "etcd" runs (in a cgroup v2 hierarchy)`)}
		}, []string{`FAIL  etcd cgroup    etcd.local_process etcd: no process named "etcd" runs (in a cgroup v2 hierarchy)`}},
		{"backend", func(d *Doctor) {
			d.Backend = func(context.Context) (string, error) { return "bootc: bootc manages this host", nil }
		}, []string{"ok    backend        bootc: bootc manages this host"}},
		{"machine-config-daemon, updates on", func(d *Doctor) {
			d.MachineConfig = func(context.Context) (string, error) {
				return "", errors.New("process 1 runs machine-config-daemon: ...")
			}
		}, []string{"FAIL  machine config process 1 runs machine-config-daemon"}},
		{"origin beside zincati's graph", func(d *Doctor) {
			d.In.Source, d.In.HostGraph = "origin", "https://updates.example"
		}, []string{"FAIL  origin         ostree ref fedora:fedora/x86_64/coreos/stable; updates.source = origin: upgrade --check (a new base commit), staged by deploy revision=; this host has an update graph"}},
		{"backend fails", func(d *Doctor) {
			d.Backend = func(context.Context) (string, error) { return "", errors.New("bootc too old") }
		}, []string{"FAIL  backend        bootc too old"}},
		{"rpm-ostree fails", func(d *Doctor) {
			d.OS = fakeOS{err: errors.New("rpm-ostree status --json: exit status 1: error: daemon not running")}
		},
			[]string{"FAIL  rpm-ostree     rpm-ostree status --json: exit status 1", "FAIL  origin         not checked: rpm-ostree status unreadable"}},
		{"our own driver", func(d *Doctor) {
			d.OS = fakeOS{driver: &rpmostree.UpdateDriver{Name: "update-agent", Unit: "update-agent.service"}}
		},
			[]string{"ok    rpm-ostree     status readable: booted abc123 (41.1), update driver update-agent"}},
		{"zincati registered", func(d *Doctor) {
			d.OS = fakeOS{driver: &rpmostree.UpdateDriver{Name: "Zincati", Unit: "zincati.service"}}
		},
			[]string{"FAIL  rpm-ostree     status readable: booted abc123 (41.1); updates are driven by Zincati (zincati.service)",
				"systemctl mask --now zincati.service"}},
		{"zincati registered, companion mode", func(d *Doctor) {
			d.In.UpdatesDisabled, d.In.PaceForeign, d.In.HostGraph, d.In.HostGraphFile = true, true, "https://updates.example", "/etc/zincati/config.d/x.toml"
			d.OS = fakeOS{driver: &rpmostree.UpdateDriver{Name: "Zincati", Unit: "zincati.service"},
				txn: &rpmostree.Transaction{Method: "Deploy", Sender: ":1.42"}}
		},
			[]string{"ok    rpm-ostree     status readable: booted abc123 (41.1), update driver Zincati",
				"ok    origin         ostree ref",
				"ok    companion mode on (staging.pace_foreign = true, updates.enabled = false)",
				"update driver Zincati (zincati.service); now running: Deploy (client :1.42), paced"}},
		{"companion mode, the trigger's cgroup", func(d *Doctor) {
			d.In.UpdatesDisabled, d.In.PaceForeign = true, true
			d.CompanionTrigger = func(context.Context) (string, error) {
				return "/sys/fs/cgroup/custom.slice/rpm-ostreed.service", nil
			}
		}, []string{"the trigger watches /sys/fs/cgroup/custom.slice/rpm-ostreed.service (its memory.stat every 250 ms); rpm-ostree is idle"}},
		{"companion mode, no cgroup for the trigger", func(d *Doctor) {
			d.In.UpdatesDisabled, d.In.PaceForeign, d.In.DaemonUnit = true, true, "rpm-ostreed.service"
			d.CompanionTrigger = func(context.Context) (string, error) { return "", errors.New("unit not loaded") }
		}, []string{"ok    companion mode on", "the trigger is off (rpm-ostreed.service's cgroup not found: unit not loaded): rpm-ostree status every 5 s alone finds transactions"}},
		{"companion mode, a finalization", func(d *Doctor) {
			d.In.UpdatesDisabled, d.In.PaceForeign = true, true
			d.OS = fakeOS{txn: &rpmostree.Transaction{Method: "FinalizeDeployment", Sender: ":1.42"}}
		}, []string{"now running: FinalizeDeployment (client :1.42), not paced: it writes no deployment"}},
		{"updates off, companion mode off", func(d *Doctor) { d.In.UpdatesDisabled = true },
			[]string{"ok    companion mode off (staging.pace_foreign = false)"}},
		{"admin user", func(d *Doctor) {
			d.In.Username, d.In.MoveLeader = "agent", true
			d.Etcd = fakeEtcd{health: healthy(), rights: Rights{Auth: true, Admin: true}}
		}, []string{"ok    etcd rights    user agent has the root role: the lock prefix and MoveLeader allowed"}},
		{"user without root role, moving leaders", func(d *Doctor) {
			d.In.Username, d.In.MoveLeader = "agent", true
			d.Etcd = fakeEtcd{health: healthy(), rights: Rights{Auth: true}}
		}, []string{"FAIL  etcd rights    user agent lacks the root role: MoveLeader (leader.move_leader = true) is an admin call"}},
		{"certificate user without root role, leaders not moved", func(d *Doctor) {
			d.Etcd = fakeEtcd{health: healthy(), rights: Rights{Auth: true}}
		}, []string{"ok    etcd rights    the client certificate's user may use the lock prefix; no admin call needed (leader.move_leader = false)"}},
		{"bfq selected", func(d *Doctor) { d.Disks = fakeDisks{sched: "bfq"} },
			[]string{"ok    staging disks  /sysroot, /var/lib/etcd on vda: bfq"}},
		{"no iocost: the rate loop paces", func(d *Doctor) { d.IO = fakeIO{costErr: errors.New("no io.cost.qos")} },
			[]string{"ok    io control     iocost: no (no io.cost.qos): the write rate loop paces staging; io.latency: no\n"}},
		{"iocost never set up on the disk", func(d *Doctor) { d.IO = fakeIO{latency: true} },
			[]string{"ok    io control     iocost: yes, used while staging; io.latency: yes; vda: qos never set up (off); model the kernel's auto model"}},
		{"iocost with a model for the disk", func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, map[string]iocost.Model{"vdb": {}, "vda": {}}
		},
			[]string{"ok    io control     iocost: yes, used while staging on vda (a model in staging.iocost_models); io.latency: no; vda: qos",
				"FAIL  iocost models  staging.iocost_models: vdb is not a staging disk (staging.paths are on vda)"}},
		{"iocost with no model for the disk", func(d *Doctor) { d.In.IOCost, d.In.IOCostModels = iocost.WithModel, map[string]iocost.Model{"vdb": {}} },
			[]string{`ok    io control     iocost: yes, not used (staging.iocost = "with-model" and staging.iocost_models has no model for vda): the write rate loop paces staging; io.latency: no; vda: qos`,
				`ok    pacing vda     the write-rate loop (staging.io_write_bandwidth_max = "auto"); not iocost: no model for vda in staging.iocost_models`,
				"FAIL  iocost models  staging.iocost_models: vdb is not a staging disk (staging.paths are on vda)"}},
		{"iocost off", func(d *Doctor) { d.In.IOCost = iocost.Off },
			[]string{"ok    io control     iocost: yes, not used (staging.iocost = false); io.latency: no; vda: qos"}},
		{"an io.latency target without io.latency", func(d *Doctor) { d.In.EtcdIOLatencyTarget = 25 * time.Millisecond },
			[]string{"FAIL  io control     staging.etcd_io_latency_target is set but the kernel has no io.latency"}},
		{"agents of the group disagree on lock.slots", func(d *Doctor) {
			d.In.LockSlots = 2
			d.Lock = fakeLock{{Group: "control-plane", Slots: 1, SlotsBy: "agent cp2",
				SlotsAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Holders: []lock.EntryStatus{{Record: lock.Record{Node: "cp2"}}}}}
		}, []string{"WARN  reboot lock    group control-plane: 1 of 1 slot(s) held, 0 waiting; holders cp2; " +
			"agents of group control-plane disagree on lock.slots: this host's is 2, agent cp2 recorded 1 at 2026-12-01T10:00:00Z"}},
		{"agents of the group agree", func(d *Doctor) {
			d.Lock = fakeLock{{Group: "control-plane", Slots: 1, SlotsBy: "agent cp2"}}
		}, []string{"ok    reboot lock    group control-plane: 0 of 1 slot(s) held, 0 waiting"}},
		{"lock off", func(d *Doctor) { d.In.LockEnabled = false },
			[]string{"ok    reboot lock    lock.enabled = false"}},
		{"lock off on a worker", func(d *Doctor) {
			d.In.LockEnabled, d.LockOff = false, func(context.Context) error { return nil }
		}, []string{"ok    reboot lock    lock.enabled = false: this node reboots without a slot (no etcd member found"}},
		{"lock off beside a member", func(d *Doctor) {
			d.In.LockEnabled = false
			d.LockOff = func(context.Context) error {
				return errors.New("lock.enabled: false is refused: this host runs an etcd member")
			}
		}, []string{"FAIL  reboot lock    lock.enabled: false is refused: this host runs an etcd member"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := good()
			tc.change(&d)
			rep := d.Run(context.Background())
			var b bytes.Buffer
			if err := rep.Write(&b); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
			checks := 16 // one pacing line (fakeDisks has one disk), page cache and io weights
			if d.Backend != nil {
				checks++
			}
			if len(d.In.IOCostModels) > 0 {
				checks++
			}
			if d.MachineConfig != nil {
				checks++
			}
			if d.In.UpdatesDisabled {
				checks++
			}
			if strings.Contains(out, "iocost with ") {
				checks++ // the model brake's line beside iocost
			}
			if len(rep) != checks {
				t.Errorf("%d lines, want one per check (%d):\n%s", len(rep), checks, out)
			}
			wantFail := strings.Contains(strings.Join(tc.want, "\n"), "FAIL")
			if (rep.Failed() > 0) != wantFail {
				t.Errorf("Failed() = %d:\n%s", rep.Failed(), out)
			}
			wantWait := strings.Contains(strings.Join(tc.want, "\n"), "WAIT")
			if (rep.Waiting() > 0) != wantWait {
				t.Errorf("Waiting() = %d:\n%s", rep.Waiting(), out)
			}
		})
	}
}

// TestEtcdDownSkips: etcd not answering is one FAIL, naming the endpoint
// and the cause; the checks it makes impossible are SKIP, in the text and
// in --json alike, and not counted as failures.
func TestEtcdDownSkips(t *testing.T) {
	d := good()
	d.Etcd = fakeEtcd{probeErr: errors.New("no endpoint accepted a status request: https://10.0.0.11:2379: connection refused")}
	rep := d.Run(context.Background())
	if n := rep.Failed(); n != 1 {
		t.Errorf("Failed() = %d, want 1 (etcd's line only)", n)
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var lines []struct{ Check, Result, Detail string }
	if err := json.Unmarshal(b.Bytes(), &lines); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range lines {
		got[l.Check] = l.Result + " " + l.Detail
	}
	for check, want := range map[string]string{
		"etcd":          "FAIL no endpoint accepted a status request: https://10.0.0.11:2379: connection refused",
		"etcd rights":   "SKIP not checked: etcd did not answer",
		"local member":  "SKIP not checked: etcd did not answer",
		"leader":        "SKIP not checked: etcd did not answer",
		"member health": "SKIP not checked: etcd did not answer",
		"etcd alarms":   "SKIP not checked: etcd did not answer",
		"reboot lock":   "SKIP not checked: etcd did not answer",
		"rpm-ostree":    "ok status readable: booted abc123 (41.1)",
	} {
		if got[check] != want {
			t.Errorf("--json %s: %q, want %q", check, got[check], want)
		}
	}
}

type fakeGates []gates.Result

func (f fakeGates) Check(context.Context) []gates.Result { return f }

// A gate that holds is WAIT (the agent is set up right, reboots wait); one
// that cannot be evaluated is FAIL.
func TestGatesWaitOrFail(t *testing.T) {
	for _, tc := range []struct {
		name string
		rs   fakeGates
		want string
	}{
		{"open", fakeGates{{Gate: "alerts", Reason: "no matching alert firing"}}, "ok    reboot gates   alerts: no matching alert firing"},
		{"holding", fakeGates{{Gate: "alerts", Hold: true, Reason: "firing: EtcdDown"}}, "WAIT  reboot gates   holding a reboot: alerts: firing: EtcdDown"},
		{"unknown", fakeGates{{Gate: "alerts", Hold: true, Unknown: true, Reason: "cannot read alerts: refused"},
			{Gate: "command", Hold: true, Reason: "/bin/false: exit status 1"}},
			"FAIL  reboot gates   holding a reboot: alerts: cannot read alerts: refused; command: /bin/false: exit status 1"},
	} {
		d := good()
		d.Gates = tc.rs
		rep := d.Run(context.Background())
		if got := rep[len(rep)-1].String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRecordsSetAside: doctor fails while an unreadable record lies set
// aside in the state directory, and passes once it is deleted.
func TestRecordsSetAside(t *testing.T) {
	dir := t.TempDir()
	d := good()
	d.In.StateDir = dir
	line := func() Result {
		t.Helper()
		rep := d.Run(context.Background())
		return rep[len(rep)-1]
	}
	if r := line(); !r.OK || r.Check != "records" {
		t.Fatalf("no record set aside: %s", r)
	}
	p := filepath.Join(dir, "iosched.json")
	if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	aside, err := atomicfile.SetAside(p, atomicfile.Corrupt, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r := line(); r.OK || !strings.Contains(r.Detail, aside) {
		t.Errorf("with %s set aside: %s", aside, r)
	}
	os.Remove(aside)
	if r := line(); !r.OK {
		t.Errorf("after deleting it: %s", r)
	}
}

// TestFleetLockLine: plain HTTP on a non-loopback fleetlock.listen fails
// doctor; HTTPS, or loopback, passes; no line while FleetLock is off.
func TestFleetLockLine(t *testing.T) {
	for _, tc := range []struct {
		listen string
		tls    bool
		want   string
	}{
		{"", false, ""},
		{":8443", false, "FAIL  fleetlock      fleetlock.listen = :8443 serves plain HTTP to other hosts: requests can be read and forged on the network; set fleetlock.cert_file and key_file (workers trust its CA) and fleetlock.allow_networks"},
		{"10.0.0.11:8443", false, "FAIL  fleetlock      fleetlock.listen = 10.0.0.11:8443 serves plain HTTP"},
		{"127.0.0.1:8443", false, "ok    fleetlock      serving plain HTTP on loopback 127.0.0.1:8443 only"},
		{":8443", true, "ok    fleetlock      serving HTTPS on :8443"},
	} {
		d := good()
		d.In.FleetLockListen, d.In.FleetLockTLS = tc.listen, tc.tls
		rep := d.Run(context.Background())
		var b bytes.Buffer
		rep.Write(&b)
		out := b.String()
		switch {
		case tc.want == "" && strings.Contains(out, "fleetlock"):
			t.Errorf("%q: a FleetLock line while it is off:\n%s", tc.listen, out)
		case !strings.Contains(out, tc.want):
			t.Errorf("%q tls=%v: report lacks %q:\n%s", tc.listen, tc.tls, tc.want, out)
		case (rep.Failed() > 0) != strings.HasPrefix(tc.want, "FAIL"):
			t.Errorf("%q tls=%v: Failed() = %d", tc.listen, tc.tls, rep.Failed())
		}
	}
}

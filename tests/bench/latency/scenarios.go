// Package latency is the staging-vs-etcd-latency benchmark: in the qemu test
// guest, on a data disk throttled by qemu like a cloud disk, it measures an
// etcd-like WAL load (fio at a fixed rate, and a real etcd member under a
// fixed put rate) while a 1.2 GiB update is staged in different ways, side
// by side in one run. The run itself is a test under the "bench" build tag
// (make bench); this file holds the plan, which is plain data.
package latency

import (
	"fmt"
	"strings"
	"time"

	"github.com/update-agent/update-agent/tests/bench/report"
)

// Disk is one throttle setting of the data disk.
type Disk struct {
	Name string
	IOPS int64
	BPS  int64
	// FioRate is the etcd-like job's fixed rate: about a third of what the
	// disk sustains for 2300-byte write+fdatasync pairs (each costs about
	// two I/Os on XFS: data and log).
	FioRate int
}

// Disks are the settings of the issue: a mid-size and a small cloud disk.
var Disks = []Disk{
	{Name: "3000iops-125MBs", IOPS: 3000, BPS: 125_000_000, FioRate: 500},
	{Name: "500iops-20MBs", IOPS: 500, BPS: 20_000_000, FioRate: 80},
}

// Stager says who stages the update in a scenario.
type Stager int

const (
	NoStaging  Stager = iota
	Naive             // plain `rpm-ostree upgrade`, default scheduler, no policy
	Recipe2020        // OpenShift's 2020 recipe: bfq, rpm-ostreed Nice=10, best-effort 6, per-object fsync
	Agent             // update-agent's daemon with its defaults plus AgentConfig
)

func (s Stager) String() string {
	return [...]string{"none", "naive", "openshift-2020", "update-agent"}[s]
}

// Scenario is one measured run.
type Scenario struct {
	ID     string // report.Scenario* for the three the ratios refer to
	Stager Stager
	// AgentConfig is a TOML fragment put over the defaults (Agent only).
	AgentConfig string
	// FioUnlimited runs the etcd-like job flat out, as etcd's docs do,
	// instead of at the disk's FioRate.
	FioUnlimited bool
	// SplitFS puts etcd and the fio job on a filesystem of their own (a
	// second partition of the same disk) instead of next to the sysroot.
	SplitFS bool
}

// Load names the fio load of s on d, as the table's "load" column.
func (s Scenario) Load(d Disk) string {
	l := fmt.Sprintf("fio-%d/s", d.FioRate)
	if s.FioUnlimited {
		l = "fio-unlimited"
	}
	if s.SplitFS {
		l += "-splitfs"
	}
	return l
}

// The update-agent configuration every Agent scenario starts from (it runs
// `update-agent stage-once`: no lock, no reboot): the shipped defaults, with
// what the guest needs (the disks behind the sysroot and etcd, the etcd
// member's unit and metrics).
const agentBase = `
[agent]
check_interval = "10m"
check_jitter = "0s"
[staging]
paths = ["/var/lib/rpm-ostree-standin", "/var/lib/data", "/var/lib/etcdfs"]
[lock]
enabled = false
[etcd]
local_unit = "bench-etcd.service"
[guard]
metrics_url = "http://127.0.0.1:2381/metrics"
`

// Knobs are the sweep: update-agent's defaults with one setting changed.
var Knobs = []struct{ ID, Config string }{
	{"k-ioclass-besteffort", "[staging]\nio_scheduling_class = \"best-effort\"\n"},
	{"k-cpuweight-100", "[staging]\ncpu_weight = \"100\"\n"},
	{"k-memoryhigh-infinity", "[staging]\nmemory_high = \"infinity\"\n"},
	// The default paces the write cap in a closed loop ("auto"): without a
	// cap, and with the fixed 5M cap that was the default before.
	{"k-bwmax-none", "[staging]\nio_write_bandwidth_max = \"\"\n"},
	{"k-bwmax-5M", "[staging]\nio_write_bandwidth_max = \"5M\"\n"},
	// Opening the window without switching the scheduler (a switch drains
	// and freezes the request queue): what the setup phase costs without it.
	{"k-scheduler-none", "[staging]\nscheduler = \"\"\n"},
	{"k-objfsync", "[staging]\nper_object_fsync = true\n"},
	{"k-nrrequests-16", "[staging]\nnr_requests = 16\n"},
	{"k-etcd-iolatency-10ms", "[staging]\netcd_io_latency_target = \"10ms\"\n"},
	{"k-guard-maxfreeze-5s", "[guard]\nmax_freeze = \"5s\"\nmin_run_share = 0.1\n"},
	{"k-maxsectors-64", "[staging]\nmax_sectors_kb = 64\n"},
	// A shallow device queue bounds how much writeback an fsync can find
	// queued ahead of it; with and without the guard.
	{"k-queue-shallow", shallowQueue},
	{"k-queue-shallow-noguard", shallowQueue + "[guard]\nenabled = false\n"},
	// The guard on etcd's cgroup PSI alone (no /metrics scrape), sampled
	// fast: cheap to read, and it sees a stall while it lasts.
	{"k-queue-shallow-psi-fast", shallowQueue + "[guard]\nmetrics_url = \"\"\ninterval = \"250ms\"\nwindow = \"1s\"\n"},
	// The guard sampling as it did before (1s/10s), and on etcd's cgroup
	// PSI alone (no metrics).
	{"k-guard-slow", "[guard]\ninterval = \"1s\"\nwindow = \"10s\"\n"},
	{"k-guard-psi-fast", "[guard]\nmetrics_url = \"\"\ninterval = \"250ms\"\nwindow = \"1s\"\n"},
	// ostree ends each transaction with syncfs: whatever the stager still
	// has dirty then goes out in one burst, and the page cache memory_high
	// allows it bounds that (the cgroup's dirty limits are shares of it).
	{"k-memoryhigh-256M", "[staging]\nmemory_high = \"256M\"\n"},
	{"k-memoryhigh-64M", "[staging]\nmemory_high = \"64M\"\n"},
	{"k-memoryhigh-16M", "[staging]\nmemory_high = \"16M\"\n"},
	{"k-memoryhigh-8M", "[staging]\nmemory_high = \"8M\"\n"},
}

const shallowQueue = "[staging]\nnr_requests = 16\nmax_sectors_kb = 64\n"

// Plan is what one run measures, in order, per disk.
type Plan struct {
	UpdateSize string // mkupdate -size
	UpdateFile int    // mkupdate -files
	AloneFor   time.Duration
	Disks      []Disk
	Scenarios  map[string][]Scenario // by disk name
}

// MakePlan returns the full plan, or the quick one (smaller update, the
// small disk only, a, b, d and e) for iteration.
func MakePlan(quick bool) Plan {
	core := func() []Scenario {
		return []Scenario{
			{ID: report.ScenarioAlone, Stager: NoStaging},
			{ID: report.ScenarioNaive, Stager: Naive},
			{ID: "c-openshift2020", Stager: Recipe2020},
			{ID: report.ScenarioAgent, Stager: Agent},
			{ID: "e-agent-noguard", Stager: Agent, AgentConfig: "[guard]\nenabled = false\n"},
		}
	}
	if quick {
		small := Disks[1]
		sc := core()
		return Plan{UpdateSize: "300MiB", UpdateFile: 3000, AloneFor: 30 * time.Second, Disks: []Disk{small},
			Scenarios: map[string][]Scenario{small.Name: {sc[0], sc[1], sc[3], sc[4]}}}
	}
	// The small disk first: it is where the stalls are.
	p := Plan{UpdateSize: "1200MiB", UpdateFile: 11500, AloneFor: 60 * time.Second, Disks: []Disk{Disks[1], Disks[0]},
		Scenarios: map[string][]Scenario{}}
	p.Scenarios[Disks[0].Name] = core()
	small := core()
	for _, k := range Knobs {
		small = append(small, Scenario{ID: k.ID, Stager: Agent, AgentConfig: k.Config})
	}
	for _, s := range []Scenario{
		{ID: report.ScenarioAlone, Stager: NoStaging},
		{ID: report.ScenarioNaive, Stager: Naive},
		{ID: report.ScenarioAgent, Stager: Agent},
	} {
		u := s
		u.FioUnlimited = true
		small = append(small, u)
		sp := s
		sp.SplitFS = true
		small = append(small, sp)
	}
	p.Scenarios[Disks[1].Name] = small
	return p
}

// Only keeps the scenarios whose ID is listed (BENCH_SCENARIOS), and the
// disks that still have one; for iterating on a single scenario.
func (p Plan) Only(ids []string) Plan {
	keep := map[string]bool{}
	for _, id := range ids {
		keep[id] = true
	}
	out := p
	out.Disks, out.Scenarios = nil, map[string][]Scenario{}
	for _, d := range p.Disks {
		for _, s := range p.Scenarios[d.Name] {
			if keep[s.ID] {
				out.Scenarios[d.Name] = append(out.Scenarios[d.Name], s)
			}
		}
		if len(out.Scenarios[d.Name]) > 0 {
			out.Disks = append(out.Disks, d)
		}
	}
	return out
}

// FilesFor keeps the file size of the 1.2 GiB / 11.5k-file update for
// another total size ("600MiB", "2GiB").
func FilesFor(size string) int {
	var n float64
	var unit string
	fmt.Sscanf(size, "%f%s", &n, &unit)
	mib := n
	if strings.HasPrefix(strings.ToUpper(unit), "G") {
		mib = n * 1024
	}
	return max(200, int(mib*11500/1200))
}

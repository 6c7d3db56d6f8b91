package latency

import (
	"fmt"
	"strings"

	"github.com/update-agent/update-agent/tests/guest"
)

// Layout is where one kind of guest (BENCH_GUEST) keeps what the bench
// measures: the disk that is throttled and measured, the sysroot that
// staging writes, etcd's and the fio job's files, and the unthrottled
// places for the update server and the results.
type Layout struct {
	// Ostree: the ostree-booted guest; staging writes the booted sysroot.
	Ostree bool
	// Disk is the throttled disk and Dev its block device name in the
	// guest (its scheduler, its /sys/block/DEV/stat).
	Disk guest.Disk
	Dev  string
	// Repo is the host repo that staging pulls into.
	Repo string
	// EtcdDir is the etcd member's data directory and FioDir the etcd-like
	// fio job's, both beside the sysroot (SplitFS: on EtcdFSDir instead,
	// plain guest only).
	EtcdDir, FioDir string
	UpdateRepo      string // the update server's repo: not throttled
	ResultDir       string // the loads' results: not throttled
	Scratch         string // the stager's log and profile: not throttled
	// StagingPaths is the agent's staging.paths: the sysroot's
	// filesystem and etcd's.
	StagingPaths []string
}

// Plain is the plain Debian guest: the stand-in keeps its own sysroot on
// the data disk (vdb), which the bench formats XFS or ext4 per disk
// setting; etcd and the fio job share it.
var Plain = Layout{
	Disk: guest.DataDisk, Dev: "vdb",
	Repo:    SysrootDir + "/ostree/repo",
	EtcdDir: DataDir + "/etcd", FioDir: DataDir + "/fio",
	UpdateRepo: UpdateRepo, ResultDir: ResultDir, Scratch: "/var/tmp",
	StagingPaths: []string{SysrootDir, DataDir, EtcdFSDir},
}

// Ostree is the ostree-booted guest (guest.Options.Ostree), one per root
// filesystem: staging is ostree's own deploy (checkout, /etc merge) into
// the booted sysroot on the root disk (vda), where etcd and the fio job
// live too (the stateroot's /var), as on RHCOS. The update server, the
// results and the bench's scratch files are on the unthrottled data disk.
var Ostree = Layout{
	Ostree: true, Disk: guest.RootDisk, Dev: "vda",
	Repo:    "/ostree/repo",
	EtcdDir: "/var/lib/etcd", FioDir: "/var/lib/etcd-fio",
	UpdateRepo: DataDir + "/updates", ResultDir: DataDir + "/bench", Scratch: DataDir + "/tmp",
	StagingPaths: []string{"/sysroot", "/var/lib/etcd"},
}

// LayoutFor is the layout BENCH_GUEST names: "" or "ostree" (the default:
// staging writes what an rpm-ostree host writes), or "plain".
func LayoutFor(name string) (Layout, error) {
	switch name {
	case "", "ostree":
		return Ostree, nil
	case "plain":
		return Plain, nil
	}
	return Layout{}, fmt.Errorf("BENCH_GUEST=%q: want plain or ostree", name)
}

// fioDir is where scenario s runs the fio job.
func (l Layout) fioDir(s Scenario) string {
	if s.SplitFS {
		return EtcdFSDir + "/fio"
	}
	return l.FioDir
}

// etcdDir is where the member keeps its data, beside the sysroot or
// (split) on its own filesystem.
func (l Layout) etcdDir(split bool) string {
	if split {
		return EtcdFSDir + "/etcd"
	}
	return l.EtcdDir
}

// agentBase is the agent's configuration for every Agent scenario (it runs
// `update-agent stage-once`: no lock, no reboot): the shipped defaults,
// with what the guest needs (the filesystems behind the sysroot and etcd,
// the etcd member's unit and metrics).
func (l Layout) agentBase() string {
	return fmt.Sprintf(agentBaseFormat, `"`+strings.Join(l.StagingPaths, `", "`)+`"`)
}

const agentBaseFormat = `
[agent]
check_interval = "10m"
check_jitter = "0s"
[staging]
paths = [%s]
[lock]
enabled = false
[etcd]
local_unit = "bench-etcd.service"
[guard]
metrics_url = "http://127.0.0.1:2381/metrics"
`

// Check refuses a plan the layout cannot run: etcd on a filesystem of its
// own needs the plain guest's split data disk, and the ostree guest's
// sysroot is the image's (its filesystem is chosen per guest, not per
// disk setting, so that is fine).
func (l Layout) Check(p Plan) error {
	if !l.Ostree {
		return nil
	}
	var bad []string
	for _, d := range p.Disks {
		for _, s := range p.Scenarios[d.Name] {
			if s.SplitFS {
				bad = append(bad, d.Name+"/"+s.Key())
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the ostree guest (BENCH_GUEST unset or ostree) has no equivalent of etcd on its own filesystem (etcd shares the root filesystem, as on RHCOS); run these with BENCH_GUEST=plain: %s", strings.Join(bad, ", "))
	}
	return nil
}

// FSGroup is the disks of a plan on one filesystem, in plan order: the
// ostree guest boots once per group (its root filesystem is the image's).
type FSGroup struct {
	FS    string
	Disks []Disk
}

// GroupByFS groups the plan's disks by filesystem, in the order each
// filesystem first appears.
func GroupByFS(disks []Disk) []FSGroup {
	var out []FSGroup
	at := map[string]int{}
	for _, d := range disks {
		i, ok := at[d.FS]
		if !ok {
			i = len(out)
			at[d.FS] = i
			out = append(out, FSGroup{FS: d.FS})
		}
		out[i].Disks = append(out[i].Disks, d)
	}
	return out
}

// Describe says in the results where staging wrote.
func (l Layout) Describe() string {
	if l.Ostree {
		return "ostree-booted (BENCH_GUEST unset or ostree): ostree's own deploy (pull, checkout, /etc merge) into the booted sysroot on the throttled root disk (vda, XFS or ext4 per disk setting), etcd and the fio job on the same filesystem (/var), the update server on an unthrottled disk"
	}
	return "plain: the stand-in's sysroot, etcd and the fio job on the throttled data disk (vdb, XFS or ext4 per disk setting), the update server on the unthrottled root disk"
}

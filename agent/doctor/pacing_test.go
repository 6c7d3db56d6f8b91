package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/iocost"
)

// fakeHost builds a root with a sysfs-like tree (relative symlinks, as
// the kernel's) and a mount table:
//
//	vda (252:0) with partitions vda1 (252:1) and vda4 (252:4)
//	dm-0 (253:0) on vda4 (LUKS): /sysroot
//	vdb (252:16): /var/lib/etcd, mounted as etcdMount says
//	vdc (252:32): not behind staging.paths
//
// and a Stat that gives the rooted staging paths their device numbers.
func fakeHost(t *testing.T, etcdMount string) SysfsDisks {
	t.Helper()
	root := t.TempDir()
	write := func(p, s string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(from, to string) {
		from, to = filepath.Join(root, from), filepath.Join(root, to)
		if err := os.MkdirAll(filepath.Dir(from), 0o755); err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(filepath.Dir(from), to)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(rel, from); err != nil {
			t.Fatal(err)
		}
	}
	dev := func(dir, devno string) {
		write(dir+"/dev", devno+"\n")
		link("sys/dev/block/"+devno, dir)
		link("sys/class/block/"+filepath.Base(dir), dir)
	}
	disk := func(dir, devno string) {
		write(dir+"/queue/scheduler", "[mq-deadline] none\n")
		dev(dir, devno)
		link("sys/block/"+filepath.Base(dir), dir)
	}
	disk("sys/devices/pci0/virtio1/block/vda", "252:0")
	for _, p := range []string{"vda1:252:1", "vda4:252:4"} {
		name, devno, _ := strings.Cut(p, ":")
		write("sys/devices/pci0/virtio1/block/vda/"+name+"/partition", "1\n")
		dev("sys/devices/pci0/virtio1/block/vda/"+name, devno)
	}
	disk("sys/devices/virtual/block/dm-0", "253:0")
	link("sys/devices/virtual/block/dm-0/slaves/vda4", "sys/devices/pci0/virtio1/block/vda/vda4")
	disk("sys/devices/pci0/virtio2/block/vdb", "252:16")
	disk("sys/devices/pci0/virtio3/block/vdc", "252:32")
	if etcdMount != "" {
		write("proc/self/mountinfo", "22 1 253:0 / /sysroot rw,relatime shared:1 - xfs /dev/mapper/root rw,attr2\n"+
			"40 22 252:16 / /var/lib/etcd rw,relatime shared:9 - "+etcdMount+"\n")
	}
	devs := map[string][2]uint32{"/sysroot": {253, 0}, "/var/lib/etcd": {252, 16}}
	return SysfsDisks{Root: root, Stat: func(p string) (uint32, uint32, error) {
		d, ok := devs[strings.TrimPrefix(p, root)]
		if !ok {
			return 0, 0, fmt.Errorf("stat %s: no such file", p)
		}
		return d[0], d[1], nil
	}}
}

// TestPacingLines: one line per staging disk saying how the window would
// pace it (iocost with the operator's or the kernel's model, the rate
// loop, or no cap where a journal orders data), and a FAIL for a model
// the window would never load, on a fake sysfs and mount table.
func TestPacingLines(t *testing.T) {
	const (
		xfs     = "xfs /dev/vdb rw"
		ordered = "ext4 /dev/vdb rw,errors=remount-ro"
		wback   = "ext4 /dev/vdb rw,data=writeback"
	)
	m := iocost.Model{User: true}
	both := map[string]iocost.Model{"vda": m, "vdb": m}
	noCostErr := errors.New("no io.cost.qos in the root cgroup")
	for _, tc := range []struct {
		name   string
		mount  string
		change func(*Doctor)
		want   []string // lines, whole
	}{
		{"a model for each disk", xfs, func(d *Doctor) { d.In.IOCost, d.In.IOCostModels = iocost.WithModel, both }, []string{
			"ok    staging disks  /sysroot, /var/lib/etcd on vda: mq-deadline ", // (bfq not offered ...); vdb
			"ok    pacing vda     iocost with the operator's model (staging.iocost_models)",
			"ok    pacing vdb     iocost with the operator's model (staging.iocost_models)",
			"ok    iocost models  vda, vdb: staging disks",
			"ok    iocost brake   on: etcd's latency over 2x its normal p99 scales the iocost models down in the window, never below what the other cgroups use by iocost's own books (guard.iocost_brake, guard.latency_factor)",
		}},
		{"the model brake off", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels, d.In.IOCostBrake = iocost.WithModel, both, false
		}, []string{
			"ok    iocost brake   off (guard.iocost_brake = false); a model that overstates the disk is not caught",
		}},
		{"iocost on every disk, one model", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels = iocost.On, map[string]iocost.Model{"vdb": m}
		}, []string{
			"ok    pacing vda     iocost with the seed model, learning this disk in the window (staging.iocost = true, no model for vda in staging.iocost_models)",
			"ok    pacing vdb     iocost with the operator's model (staging.iocost_models)",
		}},
		{"iocost on every disk, one learned", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.StateDir = iocost.On, "/var/lib/update-agent"
			d.IO = fakeIO{learned: map[string]iocost.Learned{"vdb": {Disk: "vdb", Model: "rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6", Windows: 2}}}
		}, []string{
			"ok    pacing vda     iocost with the seed model, learning this disk in the window (staging.iocost = true, no model for vda in staging.iocost_models)",
			`ok    pacing vdb     iocost with the model learned on this disk ("vdb rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6" after 2 windows) (staging.iocost = true, no model for vdb in staging.iocost_models)`,
		}},
		{"a model for one disk only", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, map[string]iocost.Model{"vda": m}
		}, []string{
			"ok    pacing vda     iocost with the operator's model (staging.iocost_models)",
			"ok    pacing vdb     no write cap: iocost on vda paces the window, and no cap goes on the other disks; not iocost: no model for vdb in staging.iocost_models",
		}},
		{"no model: the rate loop", xfs, func(d *Doctor) { d.In.IOCost = iocost.WithModel }, []string{
			`ok    pacing vda     the write-rate loop (staging.io_write_bandwidth_max = "auto"); not iocost: staging.iocost = "with-model" and staging.iocost_models is empty`,
			`ok    pacing vdb     the write-rate loop (staging.io_write_bandwidth_max = "auto"); not iocost: staging.iocost = "with-model" and staging.iocost_models is empty`,
		}},
		// The defaults: "auto" learns every disk with an 8M page cache
		// bound where a journal orders data (the stager's same decision,
		// iocost.Disks and iocost.MemoryAllowance), the rate loop and 32M
		// on XFS.
		{"auto on ext4 data=ordered: iocost learning, 8M, etcd's own weight", ordered, func(d *Doctor) {
			d.In.IOCost, d.In.MemoryHigh, d.In.MemoryHighAuto, d.In.IOCostEtcdIOWeight = iocost.Auto, 0, true, 0
		}, []string{
			`ok    io control     iocost: yes, used while staging; `,
			`ok    pacing vda     iocost with the seed model, learning this disk in the window (staging.iocost = "auto" (as true: the journal orders data), no model for vda in staging.iocost_models)`,
			`ok    pacing vdb     iocost with the seed model, learning this disk in the window (staging.iocost = "auto" (as true: the journal orders data), no model for vdb in staging.iocost_models)`,
			`ok    page cache     bound 8M: iocost on an ordered journal (staging.memory_high = "auto")`,
			`ok    io weights     under iocost on vda, vdb: IOWeight=1 on update-agent-staging.service and rpm-ostreed.service, etcd's unit keeps its own; ` +
				`every other cgroup keeps their own IOWeight (systemd's default 100) (staging.iocost_io_weight; etcd.local_unit's from staging.iocost_etcd_io_weight, auto: left alone on a journal that orders data)`,
		}},
		{"auto on XFS: the rate loop, 32M", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.MemoryHigh, d.In.MemoryHighAuto = iocost.Auto, 0, true
		}, []string{
			`ok    io control     iocost: yes, not used (staging.iocost = "auto" (as "with-model": the journal does not order data) and staging.iocost_models has no model for vda, vdb): the write rate loop paces staging; `,
			`ok    pacing vda     the write-rate loop (staging.io_write_bandwidth_max = "auto"); not iocost: staging.iocost = "auto" (as "with-model": the journal does not order data) and staging.iocost_models is empty`,
			`ok    pacing vdb     the write-rate loop (staging.io_write_bandwidth_max = "auto"); not iocost: staging.iocost = "auto" (as "with-model": the journal does not order data) and staging.iocost_models is empty`,
			`ok    page cache     bound 32M: no iocost, journal does not order data (staging.memory_high = "auto")`,
		}},
		{"an explicit memory_high wins on an ordered journal", ordered, func(d *Doctor) {
			d.In.IOCost, d.In.MemoryHigh, d.In.MemoryHighAuto = iocost.Auto, 64<<20, false
		}, []string{
			`ok    page cache     bound 64M: staging.memory_high`,
		}},
		{"ext4 data=ordered: no cap on any disk", ordered, func(d *Doctor) { d.In.IOCost = iocost.Off }, []string{
			"ok    pacing vda     no write cap: journal orders data (/var/lib/etcd (ext4 data=ordered at /var/lib/etcd)); the memory bound and the guard pace staging; not iocost: staging.iocost = false",
			"ok    pacing vdb     no write cap: journal orders data (/var/lib/etcd (ext4 data=ordered at /var/lib/etcd)); the memory bound and the guard pace staging; not iocost: staging.iocost = false",
		}},
		{"ext4 data=writeback: the rate loop", wback, func(d *Doctor) { d.In.IOCost = iocost.Off }, []string{
			`ok    pacing vdb     the write-rate loop (staging.io_write_bandwidth_max = "auto"); not iocost: staging.iocost = false`,
		}},
		{"a kernel without iocost", ordered, func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, both
			d.IO = fakeIO{costErr: noCostErr}
		}, []string{
			"ok    pacing vda     no write cap: journal orders data (/var/lib/etcd (ext4 data=ordered at /var/lib/etcd)); the memory bound and the guard pace staging; not iocost: the kernel has no iocost (no io.cost.qos in the root cgroup)",
		}},
		{"a fixed cap beside iocost", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, map[string]iocost.Model{"vda": m}
			d.In.WriteRateAuto, d.In.WriteBandwidthMax = false, 20_000_000
		}, []string{
			"ok    pacing vda     iocost with the operator's model (staging.iocost_models); and a fixed write cap of 20 MB/s (staging.io_write_bandwidth_max)",
			"ok    pacing vdb     a fixed write cap of 20 MB/s (staging.io_write_bandwidth_max); not iocost: no model for vdb in staging.iocost_models",
		}},
		{"auto without the guard", xfs, func(d *Doctor) { d.In.IOCost, d.In.GuardEnabled = iocost.Off, false }, []string{
			`ok    pacing vda     a fixed write cap at guard.rate_start (staging.io_write_bandwidth_max = "auto" without the guard: no loop); not iocost: staging.iocost = false`,
		}},
		{"no cap configured", xfs, func(d *Doctor) { d.In.IOCost, d.In.WriteRateAuto = iocost.Off, false }, []string{
			`ok    pacing vda     no write cap (staging.io_write_bandwidth_max = ""); not iocost: staging.iocost = false`,
		}},
		{"mount table unreadable", "", func(d *Doctor) { d.In.IOCost = iocost.Off }, []string{
			`ok    pacing vda     the write-rate loop (staging.io_write_bandwidth_max = "auto"); not iocost: staging.iocost = false; file systems unknown (reading the mount table: open `,
		}},
		{"a model for a partition", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, map[string]iocost.Model{"vda1": m, "vdb": m}
		}, []string{
			"FAIL  iocost models  staging.iocost_models: vda1 is not a whole disk but on vda: give the model for the whole disk",
		}},
		{"a model for a stacked device", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, map[string]iocost.Model{"dm-0": m}
		}, []string{
			"FAIL  iocost models  staging.iocost_models: dm-0 is not a whole disk but on vda: give the model for the whole disk",
		}},
		{"a model for another disk, and one for none", xfs, func(d *Doctor) {
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, map[string]iocost.Model{"vdc": m, "sdz": m}
		}, []string{
			"FAIL  iocost models  staging.iocost_models: sdz is not a staging disk (staging.paths are on vda, vdb); staging.iocost_models: vdc is not a staging disk (staging.paths are on vda, vdb)",
		}},
		{"staging disks unknown", xfs, func(d *Doctor) {
			d.In.StagingPaths = []string{"/gone"}
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, both
		}, []string{
			"FAIL  staging disks  finding the disk behind ",
			"SKIP  pacing         not checked: the staging disks are unknown (see staging disks)",
			"SKIP  iocost models  not checked: the staging disks are unknown (see staging disks)",
		}},
		{"no staging paths", xfs, func(d *Doctor) {
			d.In.StagingPaths = nil
			d.In.IOCost, d.In.IOCostModels = iocost.WithModel, map[string]iocost.Model{"vda": m}
		}, []string{
			"ok    pacing         staging.paths is empty: no staging disk to pace",
			"FAIL  iocost models  staging.iocost_models: vda is not a staging disk (staging.paths are on no disk)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := good()
			d.Disks = fakeHost(t, tc.mount)
			tc.change(&d)
			var lines []string
			for _, r := range d.Run(context.Background()) {
				lines = append(lines, r.String())
			}
			out := strings.Join(lines, "\n")
			for _, w := range tc.want {
				found := false
				for _, l := range lines {
					// a whole line, or its start where it names a temp path
					found = found || l == w || strings.HasSuffix(w, " ") && strings.HasPrefix(l, w)
				}
				if !found {
					t.Errorf("report lacks the line %q:\n%s", w, out)
				}
			}
		})
	}
}

package iosched

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/oplog"
)

// fakeSys builds a sysfs-like tree with relative symlinks, as the kernel's:
//
//	vda (252:0) with partitions vda1 (252:1) and vda2 (252:2)
//	vdb (252:16), vdc (252:32) in md0 (9:0)
//	dm-0 (253:0) on vda2 (LVM), dm-1 (253:1) on md0 (LUKS on RAID)
//	loop0 (7:0) without a queue/scheduler (as if the driver had none)
func fakeSys(t *testing.T) string {
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
	disk := func(dir, devno string) {
		name := filepath.Base(dir)
		write(dir+"/queue/scheduler", "[mq-deadline] none\n")
		write(dir+"/queue/nr_requests", "256\n")
		write(dir+"/queue/max_sectors_kb", "1280\n")
		link("dev/block/"+devno, dir)
		link("block/"+name, dir)
	}
	disk("devices/pci0/virtio1/block/vda", "252:0")
	write("devices/pci0/virtio1/block/vda/vda1/partition", "1\n")
	link("dev/block/252:1", "devices/pci0/virtio1/block/vda/vda1")
	write("devices/pci0/virtio1/block/vda/vda2/partition", "2\n")
	link("dev/block/252:2", "devices/pci0/virtio1/block/vda/vda2")
	disk("devices/pci0/virtio2/block/vdb", "252:16")
	disk("devices/pci0/virtio3/block/vdc", "252:32")
	// Stacked devices have a queue too (scheduler "none"): the resolver must
	// go through them to the disks.
	disk("devices/virtual/block/md0", "9:0")
	link("devices/virtual/block/md0/slaves/vdb", "devices/pci0/virtio2/block/vdb")
	link("devices/virtual/block/md0/slaves/vdc", "devices/pci0/virtio3/block/vdc")
	disk("devices/virtual/block/dm-0", "253:0")
	link("devices/virtual/block/dm-0/slaves/vda2", "devices/pci0/virtio1/block/vda/vda2")
	disk("devices/virtual/block/dm-1", "253:1")
	link("devices/virtual/block/dm-1/slaves/md0", "devices/virtual/block/md0")
	write("devices/virtual/block/loop0/size", "0\n")
	link("dev/block/7:0", "devices/virtual/block/loop0")
	return root
}

func TestResolve(t *testing.T) {
	sys := fakeSys(t)
	devOf := map[string][2]uint32{
		"/boot": {252, 1}, "/sysroot": {253, 0}, "/var/lib/etcd": {253, 1}, "/raw": {252, 16},
		"/loop": {7, 0}, "/tmpfs": {0, 42}, "/ghost": {8, 0},
	}
	r := Resolver{SysRoot: sys, Stat: func(p string) (uint32, uint32, error) {
		d, ok := devOf[p]
		if !ok {
			return 0, 0, fmt.Errorf("stat %s: no such file", p)
		}
		return d[0], d[1], nil
	}}
	tests := []struct {
		paths   []string
		want    []string
		wantErr string
	}{
		{[]string{"/boot"}, []string{"vda"}, ""},
		{[]string{"/sysroot"}, []string{"vda"}, ""},                     // LVM on a partition
		{[]string{"/var/lib/etcd"}, []string{"vdb", "vdc"}, ""},         // LUKS on RAID1
		{[]string{"/raw", "/var/lib/etcd"}, []string{"vdb", "vdc"}, ""}, // deduplicated
		{[]string{"/boot", "/sysroot", "/raw"}, []string{"vda", "vdb"}, ""},
		{[]string{"/tmpfs"}, nil, "no block device"},
		{[]string{"/loop"}, nil, "not a disk with a request queue"},
		{[]string{"/ghost"}, nil, "device 8:0"},
		{[]string{"/missing"}, nil, "no such file"},
	}
	for _, tc := range tests {
		got, err := r.Disks(tc.paths)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.paths[0]) {
				t.Errorf("%v: err %v, want one naming the path and %q", tc.paths, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: got %v %v, want %v", tc.paths, got, err, tc.want)
		}
	}
}

func TestParseScheduler(t *testing.T) {
	tests := []struct {
		in      string
		cur     string
		offered []string
	}{
		{"mq-deadline kyber [bfq] none\n", "bfq", []string{"mq-deadline", "kyber", "bfq", "none"}},
		{"[none] mq-deadline\n", "none", []string{"none", "mq-deadline"}},
		{"none\n", "none", []string{"none"}},
		{"", "", nil},
	}
	for _, tc := range tests {
		cur, off := ParseScheduler(tc.in)
		if cur != tc.cur || !reflect.DeepEqual(off, tc.offered) {
			t.Errorf("%q: got %q %v", tc.in, cur, off)
		}
	}
}

// fakeModprobe "loads" a scheduler by offering it on every disk, like the
// kernel does once the module is in.
type fakeModprobe struct {
	sys   string
	calls [][]string
	fail  bool
}

func (f *fakeModprobe) Run(_ context.Context, _ string, argv ...string) (oplog.Result, error) {
	f.calls = append(f.calls, argv)
	if f.fail {
		return oplog.Result{}, &oplog.Error{Argv: argv, ExitCode: 1, Stderr: "modprobe: FATAL: Module bfq not found"}
	}
	m, _ := filepath.Glob(filepath.Join(f.sys, "block", "*", "queue", "scheduler"))
	for _, p := range m {
		b, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.TrimSpace(string(b))+" "+argv[len(argv)-1]+"\n"), 0o644)
	}
	return oplog.Result{}, nil
}

func read(t *testing.T, sys, disk, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sys, "block", disk, "queue", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestApplyRestore(t *testing.T) {
	sys := fakeSys(t)
	mp := &fakeModprobe{sys: sys}
	boot := bootID(t, "boot-1")
	o := Options{SysRoot: sys, Scheduler: "bfq", NrRequests: 16, MaxSectorsKB: 64, BootIDPath: boot,
		StateFile: filepath.Join(t.TempDir(), "state", "iosched.json"), ModprobeArgv: []string{"/sbin/modprobe"}, Runner: mp}
	if err := Apply(context.Background(), o, []string{"vda", "vdb"}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mp.calls, [][]string{{"/sbin/modprobe", "bfq"}}) {
		t.Errorf("modprobe calls %v", mp.calls)
	}
	for _, d := range []string{"vda", "vdb"} {
		// The fake file holds what was written; the kernel would show the
		// list with [bfq].
		if got := read(t, sys, d, "scheduler"); got != "bfq" {
			t.Errorf("%s scheduler %q", d, got)
		}
		if got := read(t, sys, d, "nr_requests"); got != "16" {
			t.Errorf("%s nr_requests %q", d, got)
		}
		if got := read(t, sys, d, "max_sectors_kb"); got != "64" {
			t.Errorf("%s max_sectors_kb %q", d, got)
		}
	}
	if cur, _ := ParseScheduler(read(t, sys, "vdc", "scheduler")); cur != "mq-deadline" {
		t.Errorf("vdc scheduler changed to %s", cur)
	}
	st, err := load(o.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	want := State{BootID: "boot-1", Changes: []Change{{"vda", "mq-deadline", 256, 1280}, {"vdb", "mq-deadline", 256, 1280}}}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("state %+v, want %+v", st, want)
	}

	// A second Apply (after a crash) must keep the true originals.
	if err := Apply(context.Background(), o, []string{"vda"}); err != nil {
		t.Fatal(err)
	}
	if st2, _ := load(o.StateFile); !reflect.DeepEqual(st2, want) {
		t.Errorf("state after re-apply %+v, want %+v", st2, want)
	}

	// Restore needs nothing but the options: a fresh process after a crash.
	if err := Restore(Options{SysRoot: sys, StateFile: o.StateFile, BootIDPath: boot}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"vda", "vdb"} {
		if got := read(t, sys, d, "scheduler"); got != "mq-deadline" {
			t.Errorf("%s scheduler after restore %q", d, got)
		}
		if got := read(t, sys, d, "nr_requests"); got != "256" {
			t.Errorf("%s nr_requests after restore %q", d, got)
		}
		if got := read(t, sys, d, "max_sectors_kb"); got != "1280" {
			t.Errorf("%s max_sectors_kb after restore %q", d, got)
		}
	}
	if _, err := os.Stat(o.StateFile); !os.IsNotExist(err) {
		t.Errorf("state file left: %v", err)
	}
	if err := Restore(o); err != nil {
		t.Errorf("restore without state: %v", err)
	}
}

func TestApplyErrors(t *testing.T) {
	sys := fakeSys(t)
	state := filepath.Join(t.TempDir(), "iosched.json")
	mp := &fakeModprobe{sys: sys, fail: true}
	o := Options{SysRoot: sys, Scheduler: "bfq", StateFile: state, ModprobeArgv: []string{"modprobe"}, Runner: mp}
	err := Apply(context.Background(), o, []string{"vda"})
	if err == nil || !strings.Contains(err.Error(), "Module bfq not found") || !strings.Contains(err.Error(), "vda") {
		t.Errorf("modprobe failure: %v", err)
	}
	// The originals were recorded before the failure: Restore is a no-op
	// change but must leave no state behind.
	if err := Restore(o); err != nil {
		t.Errorf("restore: %v", err)
	}
	o.ModprobeArgv = nil
	if err := Apply(context.Background(), o, []string{"vda"}); err == nil || !strings.Contains(err.Error(), "not offered") {
		t.Errorf("no modprobe: %v", err)
	}
	o.Scheduler = "mq-deadline"
	if err := Apply(context.Background(), o, []string{"nosuchdisk"}); err == nil || !strings.Contains(err.Error(), "nosuchdisk") {
		t.Errorf("missing disk: %v", err)
	}
	// Keep: changes stay, nothing recorded.
	keepState := filepath.Join(t.TempDir(), "iosched.json")
	keep := Options{SysRoot: sys, Scheduler: "none", Keep: true, StateFile: keepState}
	if err := Apply(context.Background(), keep, []string{"vdc"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keepState); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keep wrote state: %v", err)
	}
	if got := read(t, sys, "vdc", "scheduler"); got != "none" {
		t.Errorf("vdc scheduler %q", got)
	}
}

// bootID writes a boot_id file holding id and returns its path.
func bootID(t *testing.T, id string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(p, []byte(id+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	return p
}

// Restore must never wedge: a disk gone since Apply is skipped (the others
// restored, the record removed), and a record of an earlier boot is dropped
// instead of putting an old boot's settings on the kernel's fresh ones.
func TestRestoreNeverWedges(t *testing.T) {
	for _, tc := range []struct {
		name string
		// between Apply and Restore: in the sysfs tree and to the boot ID.
		gone   string // disk removed from /sys/block
		reboot bool
		// want after Restore
		vda, vdb string // scheduler ("" when gone)
	}{
		{name: "same boot", vda: "mq-deadline", vdb: "mq-deadline"},
		{name: "disk gone", gone: "vdb", vda: "mq-deadline"},
		{name: "disk renamed", gone: "vda", vdb: "mq-deadline"},
		{name: "rebooted", reboot: true, vda: "kernel-default", vdb: "kernel-default"},
		{name: "rebooted and disk gone", reboot: true, gone: "vdb", vda: "kernel-default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := fakeSys(t)
			boot := bootID(t, "boot-1")
			o := Options{SysRoot: sys, Scheduler: "bfq", NrRequests: 16, BootIDPath: boot,
				StateFile: filepath.Join(t.TempDir(), "iosched.json"), ModprobeArgv: []string{"modprobe"}, Runner: &fakeModprobe{sys: sys}}
			if err := Apply(context.Background(), o, []string{"vda", "vdb"}); err != nil {
				t.Fatal(err)
			}
			if tc.reboot {
				if err := os.WriteFile(boot, []byte("boot-2\n"), 0o444); err != nil {
					t.Fatal(err)
				}
				// The kernel's own choice at boot, not the recorded one.
				for _, d := range []string{"vda", "vdb"} {
					if err := os.WriteFile(filepath.Join(sys, "block", d, "queue", "scheduler"), []byte("kernel-default"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.gone != "" {
				if err := os.Remove(filepath.Join(sys, "block", tc.gone)); err != nil {
					t.Fatal(err)
				}
			}
			if err := Restore(o); err != nil {
				t.Fatalf("restore: %v", err)
			}
			for d, want := range map[string]string{"vda": tc.vda, "vdb": tc.vdb} {
				if d == tc.gone {
					continue
				}
				if got := read(t, sys, d, "scheduler"); got != want {
					t.Errorf("%s scheduler after restore %q, want %q", d, got, want)
				}
			}
			if _, err := os.Stat(o.StateFile); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state file left: %v", err)
			}
		})
	}
}

// Apply after a reboot records the settings of this boot: an earlier boot's
// record is not "the true originals" any more.
func TestApplyDropsAnEarlierBootsRecord(t *testing.T) {
	sys := fakeSys(t)
	boot := bootID(t, "boot-2")
	o := Options{SysRoot: sys, NrRequests: 16, BootIDPath: boot, StateFile: filepath.Join(t.TempDir(), "iosched.json")}
	if err := save(o.StateFile, State{BootID: "boot-1", Changes: []Change{{Disk: "vda", NrRequests: 64}}}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(context.Background(), o, []string{"vda"}); err != nil {
		t.Fatal(err)
	}
	st, err := load(o.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	want := State{BootID: "boot-2", Changes: []Change{{Disk: "vda", NrRequests: 256}}}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("state %+v, want %+v", st, want)
	}
}

// A record that does not parse is set aside, not failed on forever: the
// disks behind the staging paths still on the window's scheduler get the
// kernel's default back (mq-deadline for one hardware queue, none for
// several), other disks are left alone, and Restore and Apply go on.
func TestCorruptRecordSetAside(t *testing.T) {
	sys := fakeSys(t)
	for _, d := range []string{"vda", "vdb", "vdc"} {
		if err := os.WriteFile(filepath.Join(sys, "block", d, "queue", "scheduler"), []byte("mq-deadline kyber [bfq] none\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"vdb/mq/0", "vdc/mq/0", "vdc/mq/1"} {
		if err := os.MkdirAll(filepath.Join(sys, "block", q), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	o := Options{SysRoot: sys, Scheduler: "bfq", BootIDPath: bootID(t, "boot-1"), StateFile: filepath.Join(dir, "iosched.json"),
		ModprobeArgv: []string{"modprobe"}, Runner: &fakeModprobe{sys: sys},
		Disks: func() ([]string, error) { return []string{"vdb", "vdc"}, nil }}
	if err := os.WriteFile(o.StateFile, []byte(`{"changes":[{"disk":"vd`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Restore(o); err != nil {
		t.Fatalf("restore with a corrupt record: %v", err)
	}
	for d, want := range map[string]string{"vda": "bfq", "vdb": "mq-deadline", "vdc": "none"} {
		if got, _, _ := o.readScheduler(d); got != want {
			t.Errorf("%s: scheduler %q, want %q", d, got, want)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "iosched.json.corrupt-") {
		t.Fatalf("state dir holds %v, want only the set-aside record", ents)
	}
	// The next staging records the defaults as the originals, not bfq.
	if err := os.WriteFile(o.StateFile, []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sys, "block", "vdb", "queue", "scheduler"), []byte("mq-deadline kyber [bfq] none\n"), 0o644)
	if err := Apply(context.Background(), o, []string{"vdb"}); err != nil {
		t.Fatalf("apply with a corrupt record: %v", err)
	}
	if st, err := load(o.StateFile); err != nil || len(st.Changes) != 1 || st.Changes[0].Scheduler != "mq-deadline" {
		t.Errorf("recorded %+v, %v; want vdb's original mq-deadline", st, err)
	}
}

package latency

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/update-agent/update-agent/tests/guest"
)

// Guest is what the benchmark needs of the test guest (*guest.Guest).
type Guest interface {
	Run(ctx context.Context, cmd string) (stdout, stderr string, code int, err error)
	CopyIn(ctx context.Context, local, remote string) error
	SetDiskThrottle(ctx context.Context, d guest.Disk, iops, bps int64) error
	// RebootWith runs cmd, which reboots the guest, and waits for the new
	// boot (the ostree guest's finalization at shutdown).
	RebootWith(ctx context.Context, cmd string) error
}

// throttle sets the measured disk's limits (0: unthrottled).
func throttle(ctx context.Context, g Guest, l Layout, iops, bps int64) error {
	return g.SetDiskThrottle(ctx, l.Disk, iops, bps)
}

// Paths in the guest.
const (
	DataDir    = guest.DataDir                 // the data disk (plain guest: throttled, first partition)
	EtcdFSDir  = "/var/lib/etcdfs"             // second partition: etcd on its own filesystem
	SysrootDir = "/var/lib/rpm-ostree-standin" // plain guest: the stand-in's sysroot
	UpdateRepo = "/srv/updates"                // plain guest's root disk: the update server, not throttled
	ResultDir  = "/var/tmp/bench"
	binDir     = "/var/lib/ua-bench" // /usr is read-only on the ostree guest
	dataDev    = "/dev/vdb"
	etcdEnv    = "/etc/bench-etcd.env"
)

// sh runs cmd in the guest and fails unless it exits 0.
func sh(ctx context.Context, g Guest, cmd string) (string, error) {
	out, errOut, code, err := g.Run(ctx, cmd)
	if err != nil {
		return out, err
	}
	if code != 0 {
		return out, fmt.Errorf("guest: %q exited %d: %s", cmd, code, strings.TrimSpace(errOut))
	}
	return out, nil
}

func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeFile writes content to path in the guest.
func writeFile(ctx context.Context, g Guest, path, content string) error {
	_, err := sh(ctx, g, fmt.Sprintf("mkdir -p %s && printf '%%s' %s > %s", q(filepath.Dir(path)), q(content), q(path)))
	return err
}

// Install copies the binaries, units and the shipped defaults into the
// guest (binDir, on /var, which survives the ostree guest's reboots) and
// installs them (installUsr). repo is the module root on the host.
func Install(ctx context.Context, g Guest, l Layout, bins Binaries, repo string) error {
	if _, err := sh(ctx, g, "rm -rf "+binDir+" && mkdir -p "+binDir); err != nil {
		return err
	}
	for _, n := range []string{"rpm-ostree", "mkupdate", "putload", "kstacks", "update-agent", "etcd"} {
		if err := g.CopyIn(ctx, bins.Path(n), binDir+"/"+n); err != nil {
			return fmt.Errorf("copying %s into the guest: %w", n, err)
		}
	}
	files := []struct{ local, remote string }{
		{"tests/rpmostree/units/rpm-ostreed.service", "/etc/systemd/system/rpm-ostreed.service"},
		{"tests/rpmostree/units/rpm-ostree-standin.tmpfiles.conf", "/etc/tmpfiles.d/rpm-ostree-standin.conf"},
		{"units/update-agent.service", "/etc/systemd/system/update-agent.service"},
		{"packaging/config.d/00-defaults.toml", binDir + "/00-defaults.toml"},
	}
	if !l.Ostree {
		// The stand-in's own shutdown hook; on the ostree guest, ostree's
		// ostree-finalize-staged.service finalizes (the stand-in's README).
		files = append(files, struct{ local, remote string }{"tests/rpmostree/units/ostree-finalize-staged.service", "/etc/systemd/system/ostree-finalize-staged.service"})
	}
	for _, f := range files {
		if _, err := sh(ctx, g, "mkdir -p "+q(filepath.Dir(f.remote))); err != nil {
			return err
		}
		if err := g.CopyIn(ctx, filepath.Join(repo, f.local), f.remote); err != nil {
			return fmt.Errorf("copying %s into the guest: %w", f.local, err)
		}
	}
	etcdUnit := `[Unit]
Description=etcd member (update-agent benchmark)
[Service]
Type=notify
EnvironmentFile=` + etcdEnv + `
ExecStart=/usr/local/bin/etcd
Restart=no
TimeoutStartSec=3min
[Install]
WantedBy=multi-user.target
`
	if err := writeFile(ctx, g, "/etc/systemd/system/bench-etcd.service", etcdUnit); err != nil {
		return err
	}
	return installUsr(ctx, g, l)
}

// installUsr puts the binaries where the RPM puts them (/usr/bin, the
// defaults in /usr/lib) and readies the run state. On the ostree guest /usr
// is read-only: `ostree admin unlock` lays a writable overlay over it until
// the next boot, so this runs again after every reboot.
func installUsr(ctx context.Context, g Guest, l Layout) error {
	var cmds []string
	if l.Ostree {
		cmds = append(cmds, "(ostree admin status | grep -q 'Unlocked: development' || ostree admin unlock >/dev/null)")
	}
	cmds = append(cmds,
		"install -m 0755 "+binDir+"/rpm-ostree /usr/bin/rpm-ostree",
		"install -m 0755 "+binDir+"/update-agent /usr/bin/update-agent",
		"install -m 0755 "+binDir+"/mkupdate "+binDir+"/putload "+binDir+"/kstacks "+binDir+"/etcd /usr/local/bin/",
		"install -D -m 0644 "+binDir+"/00-defaults.toml /usr/lib/update-agent/config.d/00-defaults.toml",
		"mkdir -p /etc/update-agent/config.d "+l.Scratch+" "+l.ResultDir,
		"systemd-tmpfiles --create /etc/tmpfiles.d/rpm-ostree-standin.conf",
		"modprobe bfq",
		"systemctl daemon-reload",
	)
	if !l.Ostree {
		cmds = append(cmds,
			// Where the agent finds the host repo on an ostree host.
			"ln -sfn "+SysrootDir+"/ostree /ostree",
			"systemctl start ostree-finalize-staged.service")
	}
	_, err := sh(ctx, g, strings.Join(cmds, " && "))
	return err
}

// MBR returns a DOS partition table for a disk of sectors 512-byte sectors:
// the first partition takes all but etcdGiB GiB, the second the rest.
func MBR(sectors uint64, etcdGiB uint64) ([]byte, error) {
	const start = 2048
	second := etcdGiB << 30 >> 9
	if sectors < start+second+start {
		return nil, fmt.Errorf("disk of %d sectors too small for a %d GiB second partition", sectors, etcdGiB)
	}
	firstLen := (sectors-second-start)/2048*2048 - start
	b := make([]byte, 512)
	entry := func(i int, lba, n uint64) {
		e := b[446+16*i:]
		copy(e[1:4], []byte{0xfe, 0xff, 0xff}) // CHS unused: LBA only
		e[4] = 0x83                            // Linux
		copy(e[5:8], []byte{0xfe, 0xff, 0xff})
		binary.LittleEndian.PutUint32(e[8:], uint32(lba))
		binary.LittleEndian.PutUint32(e[12:], uint32(n))
	}
	entry(0, start, firstLen)
	entry(1, start+firstLen, sectors-start-firstLen)
	b[510], b[511] = 0x55, 0xaa
	return b, nil
}

// PrepareDisk splits the data disk into the sysroot's filesystem (at
// DataDir) and etcd's own (at EtcdFSDir), both made with fs (xfs or ext4),
// so a scenario can put etcd beside the sysroot or on its own filesystem of
// the same disk.
func PrepareDisk(ctx context.Context, g Guest, fs string) error {
	var mkfs string
	switch fs {
	case "xfs":
		mkfs = "mkfs.xfs -q -f "
	case "ext4":
		// Eager inode table and journal init (one joined -E: mke2fs keeps
		// the last), so no ext4lazyinit I/O runs during measurements.
		mkfs = "mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "
	default:
		return fmt.Errorf("data disk filesystem %q: want xfs or ext4", fs)
	}
	// The image's fstab mounts the whole disk at DataDir: mask that mount
	// for this boot, or systemd mounts it again on the udev events the
	// repartitioning makes (seen: "BLKRRPART: Device or resource busy").
	out, err := sh(ctx, g, "systemctl stop bench-etcd rpm-ostreed update-agent 2>/dev/null; systemctl mask --runtime --now "+mountUnit(DataDir)+" >/dev/null 2>&1; umount "+SysrootDir+" 2>/dev/null; umount "+DataDir+" 2>/dev/null; umount "+EtcdFSDir+" 2>/dev/null; blockdev --getsz "+dataDev)
	if err != nil {
		return err
	}
	sectors, err := strconv.ParseUint(strings.TrimSpace(lastLine(out)), 10, 64)
	if err != nil {
		return fmt.Errorf("size of %s: %q: %w", dataDev, out, err)
	}
	mbr, err := MBR(sectors, 2)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp("", "mbr-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(mbr); err != nil {
		return err
	}
	tmp.Close()
	if err := g.CopyIn(ctx, tmp.Name(), "/var/tmp/mbr.bin"); err != nil {
		return err
	}
	_, err = sh(ctx, g, strings.Join([]string{
		"wipefs -a -q " + dataDev,
		"dd if=/var/tmp/mbr.bin of=" + dataDev + " bs=512 count=1 conv=fsync status=none",
		// Retried: udev may still hold the disk open for a moment.
		"(for i in $(seq 1 20); do udevadm settle; blockdev --rereadpt " + dataDev + " && exit 0; sleep 1; done; exit 1) 2>/dev/null || (udevadm settle; blockdev --rereadpt " + dataDev + ")",
		"udevadm settle",
		mkfs + dataDev + "1",
		mkfs + dataDev + "2",
		"mkdir -p " + DataDir + " " + EtcdFSDir,
		"mount " + dataDev + "1 " + DataDir,
		"mount " + dataDev + "2 " + EtcdFSDir,
	}, " && "))
	return err
}

// mountUnit is systemd's mount unit name for an absolute path without
// characters that need escaping ("/var/lib/data" -> "var-lib-data.mount").
func mountUnit(path string) string {
	return strings.ReplaceAll(strings.Trim(path, "/"), "/", "-") + ".mount"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// MakeUpdates makes the base and the update in the layout's update repo
// and returns their checksums.
func MakeUpdates(ctx context.Context, g Guest, l Layout, size string, files int) (base, update string, err error) {
	if l.Ostree {
		return makeOstreeUpdates(ctx, g, l, size, files)
	}
	return makePlainUpdates(ctx, g, size, files)
}

// makePlainUpdates makes the small base commit and the big update in the
// update repo and returns their checksums. Both are commits of os/stable
// (pulls check the ref binding); Reset points the ref at one or the other.
func makePlainUpdates(ctx context.Context, g Guest, size string, files int) (base, update string, err error) {
	if _, err := sh(ctx, g, "rm -rf "+UpdateRepo+" /var/tmp/mkupdate-*"); err != nil {
		return "", "", err
	}
	// bare-user: pulling it costs no decompression, so a TCG guest's scarce
	// CPU goes to the writing under test.
	mk := "mkupdate -repo " + UpdateRepo + " -mode bare-user"
	out, err := sh(ctx, g, mk+" -ref os/stable -size 16MiB -files 200 -seed 7 -generation 1")
	if err != nil {
		return "", "", err
	}
	base = strings.TrimSpace(lastLine(out))
	out, err = sh(ctx, g, fmt.Sprintf("%s -ref os/stable -size %s -files %d -seed 8 -generation 1", mk, size, files))
	if err != nil {
		return "", "", err
	}
	return base, strings.TrimSpace(lastLine(out)), nil
}

// etcdEnvFor is the member's environment with its data in dir.
func etcdEnvFor(dir string) string {
	return strings.Join([]string{
		"ETCD_NAME=bench",
		"ETCD_DATA_DIR=" + dir,
		"ETCD_LISTEN_CLIENT_URLS=http://127.0.0.1:2379",
		"ETCD_ADVERTISE_CLIENT_URLS=http://127.0.0.1:2379",
		"ETCD_LISTEN_PEER_URLS=http://127.0.0.1:2380",
		"ETCD_INITIAL_ADVERTISE_PEER_URLS=http://127.0.0.1:2380",
		"ETCD_INITIAL_CLUSTER=bench=http://127.0.0.1:2380",
		"ETCD_LISTEN_METRICS_URLS=http://127.0.0.1:2381",
		"ETCD_LOG_LEVEL=warn",
		"",
	}, "\n")
}

// StartEtcd (re)starts the member with a fresh data directory beside the
// sysroot or on its own filesystem.
func StartEtcd(ctx context.Context, g Guest, l Layout, split bool) error {
	if err := writeFile(ctx, g, etcdEnv, etcdEnvFor(l.etcdDir(split))); err != nil {
		return err
	}
	dirs := l.etcdDir(false)
	if !l.Ostree {
		dirs += " " + l.etcdDir(true)
	}
	_, err := sh(ctx, g, "systemctl stop bench-etcd; rm -rf "+dirs+" && systemctl start bench-etcd")
	return err
}

// Reset brings the sysroot back to "base booted, nothing staged", with no
// policy left on the daemon or the disk, and the update published: every
// scenario stages the same update from the same state.
func Reset(ctx context.Context, g Guest, l Layout, base, update string) error {
	if l.Ostree {
		return resetOstree(ctx, g, l, base, update)
	}
	return resetPlain(ctx, g, base, update)
}

// ResetIOCostVrate puts iocost's vrate back at 100 % on every disk it
// was set up on in this boot: the kernel keeps it from one window to the
// next, so every window but a boot's first would start at the one
// before's end (the agent rebases on it, but within the kernel's 10000 %
// ceiling, which the bench's windows, each climbing from the seed, reach
// in a few repetitions; the bench wants each one a first window). No
// interface sets it, and a device class change (the rotational flag, with
// a QoS write) did not reset it on the guest's kernel. What does: bounds
// of 100..100 and a QoS every completion misses (100th percentile, 1 µs),
// under which each busy period moves vrate 4 % toward the bounds
// (ioc_adjust_base_vrate), with direct reads from a unit of its own to
// keep iocost's timer running (with the io controller on for it: I/O the
// root cgroup is charged for is not iocost's, and the timer stayed
// still); then the kernel's own lines back, iocost
// off, as the agent's restore leaves them.
func ResetIOCostVrate(ctx context.Context, g Guest) error {
	_, err := sh(ctx, g, `for b in /sys/block/vd*; do
  dev=$(cat $b/dev) name=${b##*/}
  grep -q "^$dev " /sys/fs/cgroup/io.cost.qos || continue
  echo "$dev enable=1 ctrl=user rpct=100 rlat=1 wpct=100 wlat=1 min=100 max=100" > /sys/fs/cgroup/io.cost.qos || exit 1
  systemd-run -q --wait --collect --unit=bench-vrate-reset -p IOAccounting=yes -p IOWeight=100 -- timeout 60 sh -c \
    "until grep -q '^$dev .*cost.vrate=100.00' /sys/fs/cgroup/io.stat; do dd if=/dev/$name of=/dev/null bs=4k count=64 iflag=direct 2>/dev/null; done"
  ok=$?
  line=$(grep "^$dev " /sys/fs/cgroup/io.stat)
  echo "$dev enable=0 ctrl=auto" > /sys/fs/cgroup/io.cost.qos
  [ $ok = 0 ] || { echo "vrate not back at 100 % on $name: $line" >&2; exit 1; }
done`)
	if err != nil {
		return fmt.Errorf("resetting iocost's vrate: %w", err)
	}
	return nil
}

func resetPlain(ctx context.Context, g Guest, base, update string) error {
	_, err := sh(ctx, g, strings.Join([]string{
		"systemctl stop update-agent " + companionUnit + " rpm-ostreed 2>/dev/null; systemctl reset-failed update-agent " + companionUnit + " rpm-ostreed 2>/dev/null; true",
		"(umount " + SysrootDir + " 2>/dev/null; true)",
		"rm -rf " + DataDir + "/sysroot /run/rpm-ostree-standin/* /etc/ostree/remotes.d/fedora.conf /var/lib/update-agent /etc/update-agent/config.d/* /run/systemd/system/rpm-ostreed.service.d",
		"mkdir -p " + DataDir + "/sysroot " + SysrootDir,
		"mount --bind " + DataDir + "/sysroot " + SysrootDir,
		"echo " + base + " > " + UpdateRepo + "/refs/heads/os/stable",
		"rpm-ostree standin-init --osname=fedora-coreos --remote=fedora --url=file://" + UpdateRepo + " os/stable >/dev/null",
		"echo " + update + " > " + UpdateRepo + "/refs/heads/os/stable",
		"echo none > /sys/block/vdb/queue/scheduler",
		"systemctl daemon-reload",
		"systemctl start rpm-ostreed",
		"sync", "echo 3 > /proc/sys/vm/drop_caches",
	}, " && "))
	return err
}

// learnedFile is where the agent keeps the iocost models it learned
// (agent/stage: the state directory's iocost-learned.json).
const learnedFile = "/var/lib/update-agent/iocost-learned.json"

// keptLearned is where the bench keeps what scenario id learned on disk
// for a later scenario of the repetition (Scenario.LearnedFrom): /run,
// since Reset empties the state directory and the run is one boot.
func keptLearned(disk, id string) string { return "/run/bench-learned-" + disk + "-" + id + ".json" }

// KeepLearned keeps the models scenario id's window learned on disk, if
// it learned any (a rate-loop window learns nothing).
func KeepLearned(ctx context.Context, g Guest, disk, id string) error {
	k := keptLearned(disk, id)
	if _, err := sh(ctx, g, "rm -f "+k+" && if [ -e "+learnedFile+" ]; then cp "+learnedFile+" "+k+"; fi"); err != nil {
		return fmt.Errorf("keeping what %s learned: %w", id, err)
	}
	return nil
}

// RestoreLearned puts back, after Reset, the models scenario id learned
// on disk earlier in the repetition; an error if it learned none there.
func RestoreLearned(ctx context.Context, g Guest, disk, id string) error {
	k := keptLearned(disk, id)
	if _, err := sh(ctx, g, "test -s "+k+" && mkdir -p "+filepath.Dir(learnedFile)+" && cp "+k+" "+learnedFile); err != nil {
		return fmt.Errorf("no iocost model learned by %s on %s before it in this repetition (BENCH_SCENARIOS must name %s too, and its window must learn): %w", id, disk, id, err)
	}
	return nil
}

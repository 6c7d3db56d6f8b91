package latency

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Guest is what the benchmark needs of the test guest (*guest.Guest).
type Guest interface {
	Run(ctx context.Context, cmd string) (stdout, stderr string, code int, err error)
	CopyIn(ctx context.Context, local, remote string) error
	SetThrottle(ctx context.Context, iops, bps int64) error
}

// Paths in the guest.
const (
	DataDir    = "/var/lib/data"   // the throttled data disk (first partition)
	EtcdFSDir  = "/var/lib/etcdfs" // second partition: etcd on its own filesystem
	SysrootDir = "/var/lib/rpm-ostree-standin"
	UpdateRepo = "/srv/updates" // root disk: the update server, not throttled
	ResultDir  = "/var/tmp/bench"
	binDir     = "/usr/local/lib/ua-bench"
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

// Install copies the binaries and units into the guest and starts the
// stand-in's shutdown unit. repo is the module root on the host.
func Install(ctx context.Context, g Guest, bins Binaries, repo string) error {
	if _, err := sh(ctx, g, "rm -rf "+binDir+" && mkdir -p "+binDir); err != nil {
		return err
	}
	for _, n := range []string{"rpm-ostree", "mkupdate", "putload", "update-agent", "etcd"} {
		if err := g.CopyIn(ctx, bins.Path(n), binDir+"/"+n); err != nil {
			return fmt.Errorf("copying %s into the guest: %w", n, err)
		}
	}
	for _, f := range []struct{ local, remote string }{
		{"tests/rpmostree/units/rpm-ostreed.service", "/etc/systemd/system/rpm-ostreed.service"},
		{"tests/rpmostree/units/ostree-finalize-staged.service", "/etc/systemd/system/ostree-finalize-staged.service"},
		{"tests/rpmostree/units/rpm-ostree-standin.tmpfiles.conf", "/etc/tmpfiles.d/rpm-ostree-standin.conf"},
		{"units/update-agent.service", "/etc/systemd/system/update-agent.service"},
		{"packaging/config.d/00-defaults.toml", "/usr/lib/update-agent/config.d/00-defaults.toml"},
	} {
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
	_, err := sh(ctx, g, strings.Join([]string{
		"install -m 0755 " + binDir + "/rpm-ostree /usr/bin/rpm-ostree",
		"install -m 0755 " + binDir + "/update-agent /usr/bin/update-agent",
		"install -m 0755 " + binDir + "/mkupdate " + binDir + "/putload " + binDir + "/etcd /usr/local/bin/",
		"mkdir -p /etc/update-agent/config.d",
		// Where the agent finds the host repo on an ostree host.
		"ln -sfn " + SysrootDir + "/ostree /ostree",
		"systemd-tmpfiles --create /etc/tmpfiles.d/rpm-ostree-standin.conf",
		"modprobe bfq",
		"systemctl daemon-reload",
		"systemctl start ostree-finalize-staged.service",
	}, " && "))
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

// MakeUpdates makes the small base commit and the big update in the update
// repo and returns their checksums. Both are commits of os/stable (pulls
// check the ref binding); Reset points the ref at one or the other.
func MakeUpdates(ctx context.Context, g Guest, size string, files int) (base, update string, err error) {
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

// EtcdMode says where the etcd member keeps its data.
func etcdEnvFor(split bool) string {
	dir := DataDir + "/etcd"
	if split {
		dir = EtcdFSDir + "/etcd"
	}
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
func StartEtcd(ctx context.Context, g Guest, split bool) error {
	if err := writeFile(ctx, g, etcdEnv, etcdEnvFor(split)); err != nil {
		return err
	}
	_, err := sh(ctx, g, "systemctl stop bench-etcd; rm -rf "+DataDir+"/etcd "+EtcdFSDir+"/etcd && systemctl start bench-etcd")
	return err
}

// Reset brings the sysroot back to "base booted, nothing staged", with no
// policy left on the daemon or the disk, and the update published: every
// scenario stages the same update from the same state.
func Reset(ctx context.Context, g Guest, base, update string) error {
	_, err := sh(ctx, g, strings.Join([]string{
		"systemctl stop update-agent rpm-ostreed 2>/dev/null; systemctl reset-failed update-agent rpm-ostreed 2>/dev/null; true",
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

// recipe2020 is OpenShift's 2020 mitigation: bfq on the disk, the daemon at
// Nice=10 and best-effort priority 6, per-object fsync in the host repo.
func recipe2020(ctx context.Context, g Guest) error {
	dropIn := "[Service]\nNice=10\nIOSchedulingClass=best-effort\nIOSchedulingPriority=6\n"
	if err := writeFile(ctx, g, "/run/systemd/system/rpm-ostreed.service.d/50-recipe2020.conf", dropIn); err != nil {
		return err
	}
	_, err := sh(ctx, g, strings.Join([]string{
		"echo bfq > /sys/block/vdb/queue/scheduler",
		"ostree config --repo=" + SysrootDir + "/ostree/repo set core.per-object-fsync true",
		"systemctl daemon-reload",
		"systemctl restart rpm-ostreed",
	}, " && "))
	return err
}

// Window is when staging ran, in the guest's clock (Unix ns).
type Window struct {
	Start, End int64
	Summary    string // update-agent stage-once's report line (guard freezes)
	// AgentCPU is update-agent's user + system CPU time for the staging
	// (the shell's `times` for its children; 0 for other stagers).
	AgentCPU time.Duration
}

// Duration of the window.
func (w Window) Duration() time.Duration { return time.Duration(w.End - w.Start) }

func parseWindow(out string) (Window, error) {
	f := strings.Fields(lastLine(out))
	if len(f) < 2 {
		return Window{}, fmt.Errorf("staging window: %q", out)
	}
	a, err1 := strconv.ParseInt(f[0], 10, 64)
	b, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Window{}, fmt.Errorf("staging window: %q", out)
	}
	return Window{Start: a, End: b}, nil
}

// Stage stages the update as scenario s says and returns the window.
func Stage(ctx context.Context, g Guest, s Scenario) (Window, error) {
	switch s.Stager {
	case Naive, Recipe2020:
		if s.Stager == Recipe2020 {
			if err := recipe2020(ctx, g); err != nil {
				return Window{}, err
			}
		}
		out, err := sh(ctx, g, `t0=$(date +%s%N); rpm-ostree upgrade >/var/tmp/bench-upgrade.log 2>&1 || { cat /var/tmp/bench-upgrade.log >&2; exit 1; }; echo $t0 $(date +%s%N)`)
		if err != nil {
			return Window{}, fmt.Errorf("staging (%s): %w", s.Stager, err)
		}
		return parseWindow(out)
	case Agent:
		if err := writeFile(ctx, g, "/etc/update-agent/config.d/50-bench.toml", agentBase); err != nil {
			return Window{}, err
		}
		if s.AgentConfig != "" {
			if err := writeFile(ctx, g, "/etc/update-agent/config.d/60-scenario.toml", s.AgentConfig); err != nil {
				return Window{}, err
			}
		}
		// The agent's own staging path (policy, scheduler, drop-in, guard),
		// without lock or reboot; it undoes its policy before it exits.
		cmd := "update-agent stage-once"
		if s.Wrap != "" {
			cmd = s.Wrap + " " + cmd
		}
		if s.Profile {
			cmd += " --cpuprofile " + ProfilePath
		}
		out, err := sh(ctx, g, `rm -f `+ProfilePath+`; t0=$(date +%s%N); `+cmd+` >/var/tmp/bench-stage.out 2>/var/tmp/bench-stage.log || { tail -n 40 /var/tmp/bench-stage.log >&2; exit 1; }; t1=$(date +%s%N); times >/var/tmp/bench-stage.times; cat /var/tmp/bench-stage.out; echo $t0 $t1`)
		if err != nil {
			return Window{}, fmt.Errorf("staging (update-agent stage-once): %w", err)
		}
		w, err := parseWindow(out)
		if err != nil {
			return Window{}, err
		}
		w.Summary = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(out), lastLine(out)))
		times, err := sh(ctx, g, "cat /var/tmp/bench-stage.times")
		if err != nil {
			return Window{}, err
		}
		if w.AgentCPU, err = ChildrenCPU(times); err != nil {
			return Window{}, err
		}
		return w, nil
	case CPUBurn:
		var props []string
		for _, p := range strings.Split(s.Burn, "\n") {
			props = append(props, "-p "+q(p))
		}
		n, err := sh(ctx, g, "nproc")
		if err != nil {
			return Window{}, err
		}
		// One sha256sum of /dev/zero per CPU: all CPU, no I/O. ($$ is a $
		// to systemd, which expands the command line.)
		out, err := sh(ctx, g, fmt.Sprintf(`t0=$(date +%%s%%N); systemd-run -q --wait --collect --unit=bench-burn %s -- /bin/sh -c 'for i in $$(seq 1 %s); do timeout %d sha256sum /dev/zero & done; wait' >/dev/null 2>&1; echo $t0 $(date +%%s%%N)`,
			strings.Join(props, " "), strings.TrimSpace(n), int(BurnFor.Seconds())))
		if err != nil {
			return Window{}, fmt.Errorf("burning CPU: %w", err)
		}
		return parseWindow(out)
	}
	return Window{}, fmt.Errorf("scenario %s stages nothing", s.ID)
}

// Loads are the etcd-like fio job and the put load on the etcd member,
// running as units so a scenario's policy can tell them from the stager.
type Loads struct {
	Dir     string // result directory in the guest
	StartNS int64  // guest clock when the loads started
}

// StartLoads starts both loads; results go to dir.
func StartLoads(ctx context.Context, g Guest, dir string, job []string, putRate int) (Loads, error) {
	fio := "fio " + strings.Join(quoteAll(job), " ") + " --output=" + q(dir+"/fio.json")
	out, err := sh(ctx, g, strings.Join([]string{
		"rm -rf " + q(dir) + " && mkdir -p " + q(dir),
		"rm -rf " + DataDir + "/fio " + EtcdFSDir + "/fio && mkdir -p " + DataDir + "/fio " + EtcdFSDir + "/fio",
		"echo $(date +%s%N)",
		"systemd-run -q --unit=bench-fio --collect -p KillSignal=SIGINT -- " + fio,
		fmt.Sprintf("systemd-run -q --unit=bench-put --collect -- /usr/local/bin/putload -rate %d -out %s", putRate, q(dir+"/etcd")),
	}, " && "))
	if err != nil {
		return Loads{}, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(strings.Split(strings.TrimSpace(out), "\n")[0]), 10, 64)
	if err != nil {
		return Loads{}, fmt.Errorf("load start time: %q", out)
	}
	return Loads{Dir: dir, StartNS: ns}, nil
}

// StopLoads stops both loads (fio writes its report on SIGINT, putload its
// last scrape on SIGTERM) and waits until they are gone.
func StopLoads(ctx context.Context, g Guest) error {
	_, err := sh(ctx, g, `systemctl stop bench-fio bench-put 2>/dev/null; for i in $(seq 1 120); do systemctl -q is-active bench-fio bench-put || exit 0; sleep 0.5; done; exit 1`)
	return err
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = q(s)
	}
	return out
}

// ProfilePath is where stage-once writes its CPU profile in the guest.
const ProfilePath = "/var/tmp/bench-stage.pprof"

// FetchBinary copies a binary file out of the guest (base64 on the way).
func FetchBinary(ctx context.Context, g Guest, path string) ([]byte, error) {
	out, err := sh(ctx, g, "base64 -w0 "+q(path))
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(strings.TrimSpace(out))
}

// Fetch copies a file out of the guest by printing it.
func Fetch(ctx context.Context, g Guest, path string) ([]byte, error) {
	out, err := sh(ctx, g, "cat "+q(path))
	return []byte(out), err
}

// ChildrenCPU reads the shell's `times` output (bash: "0m1.234s 0m0.567s",
// dash: "0m1.234000s 0m0.567000s"; the second line is the children's user
// and system time) into their sum.
func ChildrenCPU(times string) (time.Duration, error) {
	lines := strings.Split(strings.TrimSpace(times), "\n")
	if len(lines) < 2 {
		return 0, fmt.Errorf("times output %q: want two lines", times)
	}
	var total time.Duration
	f := strings.Fields(lines[1])
	if len(f) != 2 {
		return 0, fmt.Errorf("times output %q", times)
	}
	for _, v := range f {
		m, s, ok := strings.Cut(strings.TrimSuffix(v, "s"), "m")
		mins, err1 := strconv.Atoi(m)
		secs, err2 := strconv.ParseFloat(s, 64)
		if !ok || err1 != nil || err2 != nil {
			return 0, fmt.Errorf("times output %q", times)
		}
		total += time.Duration((float64(mins)*60 + secs) * float64(time.Second))
	}
	return total, nil
}

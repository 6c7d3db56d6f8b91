// Package guest boots a real Debian guest with systemd as PID 1 under qemu
// for end-to-end tests: transient units, cgroup v2, bfq, journald and real
// reboots cannot be checked on a machine without systemd.
//
// The image is built once by build-image.sh into a cache outside the repo
// (keyed by a hash of the script and packages.txt). Each guest boots that
// image through a copy-on-write overlay, so the cache stays clean, plus a
// fresh XFS data disk mounted at DataDir that qemu can throttle like a cloud
// disk. Use Shared (with Main in TestMain) to boot once per test binary.
package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

const (
	// DataDir is where the data disk (XFS) is mounted in the guest: the
	// ostree repo and the etcd data go there.
	DataDir = "/var/lib/data"
	// DataDevice is the data disk's block device in the guest.
	DataDevice = "/dev/vdb"
	// dataDiskID is the qdev id of the data disk's virtio-blk-pci device;
	// QMP's block commands want the virtio-blk device inside it, which owns
	// the block backend (dataDiskQOM).
	dataDiskID  = "vdata"
	dataDiskQOM = "/machine/peripheral/" + dataDiskID + "/virtio-backend"
	rootDiskID  = "vroot"
	rootDiskQOM = "/machine/peripheral/" + rootDiskID + "/virtio-backend"
)

// Options configure a guest. The zero value is a 2-vCPU, 3.5 GiB guest with
// an unthrottled 8 GiB data disk.
type Options struct {
	// DataDiskIOPS and DataDiskBPS throttle the data disk (qemu's
	// throttling.iops-total / throttling.bps-total, bytes per second);
	// 0 means unthrottled. SetThrottle changes them while the guest runs.
	DataDiskIOPS int64
	DataDiskBPS  int64
	// DataDiskSize in bytes (sparse on the host); default 8 GiB.
	DataDiskSize int64
	// DataDiskCache is qemu's cache mode for the data disk; default
	// "writeback" (guest flushes reach the host disk; "unsafe" drops them).
	DataDiskCache string
	// RootDiskIOPS and RootDiskBPS throttle the root disk (vda) like the
	// data disk's; 0 means unthrottled. SetDiskThrottle(RootDisk, ...)
	// changes them while the guest runs. On the ostree guest the root is
	// the sysroot that ostree stages into, as on RHCOS.
	RootDiskIOPS int64
	RootDiskBPS  int64
	// RootDiskCache is qemu's cache mode for the root disk's overlay;
	// default "unsafe" (guest flushes never reach the host disk: losing
	// the overlay on a host crash is fine). "writeback" makes an fsync in
	// the guest reach the host disk, as the data disk's do.
	RootDiskCache string
	// RootFS is the ostree guest's physical root filesystem: "ext4"
	// (default) or "xfs" (a cached image of its own; the plain guest's
	// root is always ext4).
	RootFS    string
	CPUs      int // default 2
	MemoryMiB int // default 3584
	// Accel is "kvm" or "tcg"; empty means $UA_GUEST_ACCEL, else KVM when a
	// cheap probe says it can work, else TCG.
	Accel string
	// BootTimeout bounds boot (and each reboot) until systemd has settled;
	// default $UA_GUEST_BOOT_TIMEOUT, else 15 minutes: a TCG boot takes
	// ~35-55 s on 2 idle cores but several minutes when other guests share
	// them.
	BootTimeout time.Duration
	// Log receives progress lines; default os.Stderr.
	Log io.Writer
	// Ostree boots the ostree-booted image (build-ostree-image.sh) instead:
	// the root is a deployment with /usr read-only, /boot is a disk of its
	// own, and every reboot (planned or not) boots the default boot entry,
	// as a bootloader would, so a finalized deployment is what boots next.
	Ostree bool
	// KeepDir keeps the guest's working directory (console log, disks) after
	// Stop; also set by UA_GUEST_KEEP=1.
	KeepDir bool
}

func (o Options) withDefaults() Options {
	if o.DataDiskSize <= 0 {
		o.DataDiskSize = 8 << 30
	}
	if o.DataDiskCache == "" {
		o.DataDiskCache = "writeback"
	}
	if o.RootDiskCache == "" {
		o.RootDiskCache = "unsafe"
	}
	if o.RootFS == "" {
		o.RootFS = "ext4"
	}
	if o.CPUs <= 0 {
		o.CPUs = 2
	}
	if o.MemoryMiB <= 0 {
		o.MemoryMiB = 3584
	}
	if o.BootTimeout <= 0 {
		o.BootTimeout = 15 * time.Minute
		if d, err := time.ParseDuration(os.Getenv("UA_GUEST_BOOT_TIMEOUT")); err == nil && d > 0 {
			o.BootTimeout = d
		}
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if os.Getenv("UA_GUEST_KEEP") == "1" {
		o.KeepDir = true
	}
	return o
}

// check refuses what no image provides.
func (o Options) check() error {
	switch {
	case o.RootFS != "ext4" && o.RootFS != "xfs":
		return fmt.Errorf("guest options: RootFS %q: want ext4 or xfs", o.RootFS)
	case o.RootFS != "ext4" && !o.Ostree:
		return fmt.Errorf("guest options: RootFS %q needs Ostree (the plain guest's root is ext4)", o.RootFS)
	}
	return nil
}

// Guest is a running qemu guest reachable over ssh on 127.0.0.1.
type Guest struct {
	opts  Options
	img   image
	dir   string // working directory: overlay, data disk, console log, sockets
	accel string
	port  int

	procMu     sync.Mutex
	qemu       *process // nil before the first start
	restarting bool     // between two boots of an ostree guest
	restartErr error    // why the last boot after a reboot failed
	stopping   bool

	sshMu  sync.Mutex
	master *process // ssh ControlMaster, nil while none runs

	qmpMu    sync.Mutex
	stopOnce sync.Once
}

// Start builds (or reuses) the image and boots a guest, returning once ssh
// works and `systemctl is-system-running --wait` reports "running".
func Start(ctx context.Context, opts Options) (*Guest, error) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	cleanStaleDirs(opts.Log)
	img, err := ensureImage(ctx, opts.Log, opts.Ostree, opts.RootFS)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ua-guest-")
	if err != nil {
		return nil, fmt.Errorf("making the guest directory: %w", err)
	}
	g := &Guest{opts: opts, img: img, dir: dir}
	if err := g.makeDisks(ctx); err != nil {
		g.Stop()
		return nil, err
	}
	g.accel = chooseAccel(opts.Accel)
	start := time.Now()
	if err := g.boot(ctx); err != nil {
		err = fmt.Errorf("booting the test guest (%s, console log %s): %w\n%s",
			g.accel, g.consolePath(), err, g.consoleTail(60))
		g.Stop()
		return nil, err
	}
	fmt.Fprintf(opts.Log, "guest: up (%s) in %s, ssh on 127.0.0.1:%d, dir %s\n",
		g.accel, time.Since(start).Round(100*time.Millisecond), g.port, g.dir)
	return g, nil
}

// makeDisks makes the root overlay over the cached image and a fresh XFS
// data disk, on the host (no loop mounts).
func (g *Guest) makeDisks(ctx context.Context) error {
	overlay := filepath.Join(g.dir, "root.qcow2")
	if err := runHost(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", g.img.root, overlay); err != nil {
		return fmt.Errorf("making the root overlay: %w", err)
	}
	if g.opts.Ostree {
		// A private copy: the guest writes boot entries to it, and the
		// launcher reads them between boots.
		if err := runHost(ctx, "cp", "--sparse=always", g.img.boot, g.bootDisk()); err != nil {
			return fmt.Errorf("copying /boot's disk: %w", err)
		}
		if err := os.Chmod(g.bootDisk(), 0o644); err != nil {
			return err
		}
	}
	data := filepath.Join(g.dir, "data.raw")
	f, err := os.Create(data)
	if err != nil {
		return fmt.Errorf("making the data disk: %w", err)
	}
	err = f.Truncate(g.opts.DataDiskSize)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing the data disk: %w", err)
	}
	if err := runHost(ctx, "mkfs.xfs", "-q", "-L", "ua-data", data); err != nil {
		return fmt.Errorf("formatting the data disk: %w", err)
	}
	return nil
}

// boot starts qemu and waits for a settled system. A port taken between
// choosing and binding it, or KVM failing at start, gets another try.
func (g *Guest) boot(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.opts.BootTimeout)
	defer cancel()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if g.port, err = freePort(); err != nil {
			return err
		}
		from := g.consoleSize()
		if err = g.startQEMU(); err != nil {
			return err
		}
		err = g.waitUp(ctx, "", from)
		if err == nil {
			return g.settle(ctx)
		}
		if !g.exited() {
			return err
		}
		// qemu exited on its own: retry only for failures a retry can fix.
		stderr := g.qemuStderr()
		switch {
		case strings.Contains(stderr, "hostfwd") || strings.Contains(stderr, "host forwarding"):
			fmt.Fprintf(g.opts.Log, "guest: port %d taken, retrying\n", g.port)
		case g.accel == "kvm":
			fmt.Fprintf(g.opts.Log, "guest: qemu with KVM failed (%s), falling back to TCG\n", lastLine(stderr))
			g.accel = "tcg"
		default:
			return err
		}
	}
	return err
}

// Stop kills qemu and removes the guest's working directory (the cached
// image is untouched). Safe to call more than once.
func (g *Guest) Stop() {
	g.stopOnce.Do(func() {
		g.stopMaster()
		g.procMu.Lock()
		g.stopping = true
		g.procMu.Unlock()
		// A boot after a reboot may be starting qemu: it sees stopping and
		// kills what it started; wait for it before taking the current one.
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			g.procMu.Lock()
			r := g.restarting
			g.procMu.Unlock()
			if !r {
				break
			}
		}
		g.procMu.Lock()
		p := g.qemu
		g.procMu.Unlock()
		if p != nil {
			_ = p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				fmt.Fprintf(g.opts.Log, "guest: qemu pid %d did not exit after SIGKILL\n", p.cmd.Process.Pid)
			}
		}
		if g.opts.KeepDir {
			fmt.Fprintf(g.opts.Log, "guest: kept %s\n", g.dir)
			return
		}
		_ = os.RemoveAll(g.dir)
	})
}

// Dir is the guest's working directory on the host.
func (g *Guest) Dir() string { return g.dir }

// Accel is the accelerator qemu runs with: "kvm" or "tcg".
func (g *Guest) Accel() string { return g.accel }

// SSHPort is the host port forwarded to the guest's sshd on 127.0.0.1.
func (g *Guest) SSHPort() int { return g.port }

// ConsoleTail returns the last n lines of the serial console.
func (g *Guest) ConsoleTail(n int) string { return g.consoleTail(n) }

func (g *Guest) bootDisk() string { return filepath.Join(g.dir, "boot.raw") }

func (g *Guest) consolePath() string { return filepath.Join(g.dir, "console.log") }

func (g *Guest) consoleSize() int64 {
	fi, err := os.Stat(g.consolePath())
	if err != nil {
		return 0
	}
	return fi.Size()
}

// consoleSince is the console from byte offset from on (all of it if the
// file is shorter: it was made anew).
func (g *Guest) consoleSince(from int64) []byte {
	b, _ := os.ReadFile(g.consolePath())
	if from < 0 || from > int64(len(b)) {
		from = 0
	}
	return b[from:]
}

// rebootReport is what a failed reboot shows: the kernel's warnings since
// the reboot began (a hung task's or a stall's first line scrolls out of
// the tail), and the console's last lines.
func (g *Guest) rebootReport(from int64) string {
	var b strings.Builder
	if w := KernelWarnings(g.consoleSince(from), 20); len(w) > 0 {
		b.WriteString("--- kernel warnings since the reboot began ---\n" + strings.Join(w, "\n") + "\n")
	}
	b.WriteString(g.consoleTail(60))
	return b.String()
}

// kernelWarning matches the first line of what the kernel prints when
// something is stuck or broken (hung task, RCU stall, soft lockup, oops,
// OOM), and systemd's own timeouts during shutdown.
var kernelWarning = regexp.MustCompile(`INFO: task .* blocked for more than|rcu: INFO:|rcu_.*(stall|detected)|` +
	`watchdog: BUG|soft lockup|BUG: |WARNING: CPU|Kernel panic|Out of memory|invoked oom-killer|` +
	`Sending SIGKILL|timed out\. Killing|Watchdog timeout|A stop job is running|reboot: (Restarting|Power down)`)

// KernelWarnings returns up to max console lines that kernelWarning
// matches, each with the line number, so the order of events shows.
func KernelWarnings(console []byte, max int) []string {
	var out []string
	for i, line := range strings.Split(string(console), "\n") {
		if kernelWarning.MatchString(line) {
			out = append(out, fmt.Sprintf("%d: %s", i+1, strings.TrimRight(line, "\r")))
			if len(out) == max {
				break
			}
		}
	}
	return out
}

func (g *Guest) consoleTail(n int) string {
	b, err := os.ReadFile(g.consolePath())
	if err != nil {
		return fmt.Sprintf("(no console log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "--- serial console (last lines) ---\n" + strings.Join(lines, "\n") + "\n--- end of console ---"
}

func (g *Guest) qemuStderr() string {
	b, _ := os.ReadFile(filepath.Join(g.dir, "qemu.log"))
	return strings.TrimSpace(string(b))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// runHost runs a host-side helper command, returning its output on failure.
func runHost(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || len(out) > 0 {
			return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

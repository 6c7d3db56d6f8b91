package guest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// chooseAccel picks KVM only when asked or when the CPU advertises hardware
// virtualisation and /dev/kvm opens: a /dev/kvm without vmx/svm (a PVM
// device) makes qemu abort or hang, so it is not worth a trial boot.
func chooseAccel(want string) string {
	if want == "" {
		want = os.Getenv("UA_GUEST_ACCEL")
	}
	if want == "kvm" || want == "tcg" {
		return want
	}
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err == nil {
		f.Close()
	}
	return accelFor(cpuinfo, err == nil)
}

func accelFor(cpuinfo []byte, kvmOpens bool) string {
	if !kvmOpens {
		return "tcg"
	}
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if f == "vmx" || f == "svm" {
				return "kvm"
			}
		}
	}
	return "tcg"
}

// qemuConfig is everything qemuArgs needs; kept apart so the command line
// can be checked without starting qemu.
type qemuConfig struct {
	accel                 string
	cpus, memMiB, port    int
	kernel, initrd        string
	rootOverlay, dataDisk string
	// bootDisk (ostree guest): /boot's own raw disk. cmdline: the kernel
	// command line, default kernelCmdline. exitOnReboot makes a guest
	// reboot end qemu, so the launcher can boot
	// the default entry next, as a bootloader would.
	bootDisk, cmdline      string
	exitOnReboot           bool
	dataIOPS, dataBPS      int64
	dataCache              string
	rootIOPS, rootBPS      int64
	rootCache              string
	console, qmpSock, pidf string
}

// kernelCmdline: cgroup v2 with the io controller; mitigations off because
// they only slow TCG down.
const kernelCmdline = "console=ttyS0,115200 root=/dev/vda rw rootfstype=ext4 " +
	"systemd.unified_cgroup_hierarchy=1 mitigations=off"

func qemuArgs(c qemuConfig) []string {
	cmdline := c.cmdline
	if cmdline == "" {
		cmdline = kernelCmdline
	}
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none",
		"-machine", "q35",
		"-smp", strconv.Itoa(c.cpus), "-m", strconv.Itoa(c.memMiB),
		// Appended: an ostree guest boots each time in a new qemu, and a
		// reboot that never comes back must still show the old boot's end.
		"-chardev", "file,id=con,append=on,path=" + c.console, "-serial", "chardev:con",
		"-kernel", c.kernel, "-initrd", c.initrd, "-append", cmdline,
		// Root: an overlay over the cached image (cache "unsafe" by default:
		// losing it on a host crash is fine, so host flushes are skipped).
		"-drive", fmt.Sprintf("file=%s,format=qcow2,if=none,id=root,cache=%s,discard=unmap,"+
			"throttling.iops-total=%d,throttling.bps-total=%d", c.rootOverlay, c.rootCache, c.rootIOPS, c.rootBPS),
		"-device", "virtio-blk-pci,drive=root,id=" + rootDiskID + ",serial=root",
		"-drive", fmt.Sprintf("file=%s,format=raw,if=none,id=data,cache=%s,throttling.iops-total=%d,throttling.bps-total=%d",
			c.dataDisk, c.dataCache, c.dataIOPS, c.dataBPS),
		"-device", "virtio-blk-pci,drive=data,id=" + dataDiskID + ",serial=data",
		// Only loopback: no guest traffic leaves, ssh reachable on 127.0.0.1.
		"-netdev", fmt.Sprintf("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:%d-:22", c.port),
		"-device", "virtio-net-pci,netdev=net0",
		"-qmp", "unix:" + c.qmpSock + ",server=on,wait=off",
		"-pidfile", c.pidf,
	}
	if c.bootDisk != "" {
		// After the data disk, so it is vdc in the guest.
		args = append(args,
			"-drive", "file="+c.bootDisk+",format=raw,if=none,id=boot,cache=writeback",
			"-device", "virtio-blk-pci,drive=boot,id=vboot,serial=boot")
	}
	if c.exitOnReboot {
		args = append(args, "-action", "reboot=shutdown")
	}
	if c.accel == "kvm" {
		return append(args, "-accel", "kvm", "-cpu", "host")
	}
	return append(args, "-accel", "tcg,thread=multi")
}

func (g *Guest) qmpPath() string { return filepath.Join(g.dir, "qmp.sock") }

func (g *Guest) startQEMU() error {
	g.procMu.Lock() // SetDiskThrottle may change the limits meanwhile
	dataIOPS, dataBPS, rootIOPS, rootBPS := g.opts.DataDiskIOPS, g.opts.DataDiskBPS, g.opts.RootDiskIOPS, g.opts.RootDiskBPS
	g.procMu.Unlock()
	c := qemuConfig{
		accel: g.accel, cpus: g.opts.CPUs, memMiB: g.opts.MemoryMiB, port: g.port,
		kernel: g.img.kernel, initrd: g.img.initrd,
		rootOverlay: filepath.Join(g.dir, "root.qcow2"), dataDisk: filepath.Join(g.dir, "data.raw"),
		dataIOPS: dataIOPS, dataBPS: dataBPS, dataCache: g.opts.DataDiskCache,
		rootIOPS: rootIOPS, rootBPS: rootBPS, rootCache: g.opts.RootDiskCache,
		console: g.consolePath(), qmpSock: g.qmpPath(), pidf: filepath.Join(g.dir, "qemu.pid"),
	}
	if g.opts.Ostree {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		e, kernel, initrd, err := readDefaultEntry(ctx, g.bootDisk(), g.dir)
		cancel()
		if err != nil {
			return fmt.Errorf("reading the default boot entry: %w", err)
		}
		fmt.Fprintf(g.opts.Log, "guest: booting entry %s (%s)\n", e.name, e.options)
		c.kernel, c.initrd, c.cmdline = kernel, initrd, e.options
		c.bootDisk, c.exitOnReboot = g.bootDisk(), true
	}
	logf, err := os.Create(filepath.Join(g.dir, "qemu.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command("qemu-system-x86_64", qemuArgs(c)...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	p, err := startProcess(cmd)
	logf.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("starting qemu: %w", err)
	}
	g.procMu.Lock()
	if g.stopping {
		g.procMu.Unlock()
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("starting qemu: the guest is stopping")
	}
	g.qemu = p
	g.procMu.Unlock()
	if c.exitOnReboot {
		go g.followReboots(p)
	}
	return nil
}

// followReboots boots the guest again when qemu ends because the guest
// rebooted (exit status 0 with exitOnReboot; a crash or a kill is not a
// reboot; a poweroff also exits 0 and boots again, tests never power
// off), reading the default boot entry anew: a finalized deployment
// boots, as it would behind a bootloader. The ssh port stays the same.
func (g *Guest) followReboots(p *process) {
	<-p.done
	g.procMu.Lock()
	if g.stopping || g.qemu != p || p.err != nil {
		g.procMu.Unlock()
		return
	}
	g.restarting = true
	g.procMu.Unlock()
	err := g.startQEMU()
	g.procMu.Lock()
	g.restarting = false
	g.restartErr = err
	g.procMu.Unlock()
	if err != nil {
		fmt.Fprintf(g.opts.Log, "guest: booting after a reboot: %v\n", err)
	}
}

// exited reports whether qemu is gone for good (not between two boots).
func (g *Guest) exited() bool {
	g.procMu.Lock()
	defer g.procMu.Unlock()
	if g.restarting {
		return false
	}
	if g.qemu == nil {
		return true
	}
	select {
	case <-g.qemu.done:
		return true
	default:
		return false
	}
}

// qemuExit describes how qemu ended; call only once exited() is true.
func (g *Guest) qemuExit() string {
	g.procMu.Lock()
	defer g.procMu.Unlock()
	if g.qemu == nil {
		return "not started"
	}
	if g.restartErr != nil {
		return fmt.Sprintf("%v; booting again after a reboot: %v", g.qemu.err, g.restartErr)
	}
	return fmt.Sprint(g.qemu.err)
}

// process is a child that dies with the test process.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid once done is closed
}

// startProcess starts cmd with Pdeathsig so it is killed if the test
// process dies (a go test timeout, a panic, SIGKILL). Pdeathsig fires when
// the *thread* that forked the child exits, so the fork happens on a locked
// thread that stays blocked in Wait for the child's whole life.
func startProcess(cmd *exec.Cmd) (*process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with this goroutine, after the
		// child is gone.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before qemu binds it; boot retries on that.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// cleanStaleDirs removes working directories left by test processes that
// died before Stop (their qemu died with them through Pdeathsig).
func cleanStaleDirs(log io.Writer) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "ua-guest-*"))
	for _, d := range dirs {
		if strings.HasPrefix(filepath.Base(d), "ua-guest-build-") {
			continue
		}
		st, err := os.Stat(d)
		if err != nil || !st.IsDir() || time.Since(st.ModTime()) < time.Hour && !hasDeadPid(d) {
			continue
		}
		if pidAlive(d) {
			continue
		}
		fmt.Fprintf(log, "guest: removing stale %s\n", d)
		_ = os.RemoveAll(d)
	}
}

func readPid(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "qemu.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func pidAlive(dir string) bool {
	pid := readPid(dir)
	if pid <= 0 {
		return false
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.HasPrefix(string(comm), "qemu")
}

func hasDeadPid(dir string) bool { return readPid(dir) > 0 && !pidAlive(dir) }

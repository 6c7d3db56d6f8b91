package guest

import (
	"bytes"
	"context"
	_ "embed"
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

//go:embed build-image.sh
var buildScript []byte

//go:embed packages.txt
var packageList []byte

// image is a built guest image in the cache.
type image struct {
	dir, kernel, initrd, root, key, knownHosts string
}

// ensureImage runs build-image.sh, which reuses the cached image when its
// inputs did not change. The script is embedded so the helper does not
// depend on the test's working directory.
func ensureImage(ctx context.Context, log io.Writer) (image, error) {
	tmp, err := os.MkdirTemp("", "ua-guest-build-")
	if err != nil {
		return image{}, err
	}
	defer os.RemoveAll(tmp)
	script := filepath.Join(tmp, "build-image.sh")
	if err := os.WriteFile(script, buildScript, 0o755); err != nil {
		return image{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "packages.txt"), packageList, 0o644); err != nil {
		return image{}, err
	}
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout = &stdout
	cmd.Stderr = log
	if err := cmd.Run(); err != nil {
		return image{}, fmt.Errorf("building the guest image (tests/guest/build-image.sh): %w", err)
	}
	dir := lastLine(stdout.String())
	img := image{
		dir:        dir,
		kernel:     filepath.Join(dir, "vmlinuz"),
		initrd:     filepath.Join(dir, "initrd.img"),
		root:       filepath.Join(dir, "root.img"),
		key:        filepath.Join(dir, "id_ed25519"),
		knownHosts: filepath.Join(dir, "known_hosts"),
	}
	for _, p := range []string{img.kernel, img.initrd, img.root, img.key, img.knownHosts} {
		if _, err := os.Stat(p); err != nil {
			return image{}, fmt.Errorf("guest image %q is incomplete: %w", dir, err)
		}
	}
	return img, nil
}

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
	accel                  string
	cpus, memMiB, port     int
	kernel, initrd         string
	rootOverlay, dataDisk  string
	dataIOPS, dataBPS      int64
	dataCache              string
	console, qmpSock, pidf string
}

// kernelCmdline: cgroup v2 with the io controller; mitigations off because
// they only slow TCG down.
const kernelCmdline = "console=ttyS0,115200 root=/dev/vda rw rootfstype=ext4 " +
	"systemd.unified_cgroup_hierarchy=1 mitigations=off"

func qemuArgs(c qemuConfig) []string {
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none",
		"-machine", "q35",
		"-smp", strconv.Itoa(c.cpus), "-m", strconv.Itoa(c.memMiB),
		"-chardev", "file,id=con,path=" + c.console, "-serial", "chardev:con",
		"-kernel", c.kernel, "-initrd", c.initrd, "-append", kernelCmdline,
		// Root: an overlay over the cached image; losing it on a host crash
		// is fine, so host flushes are skipped.
		"-drive", "file=" + c.rootOverlay + ",format=qcow2,if=none,id=root,cache=unsafe,discard=unmap",
		"-device", "virtio-blk-pci,drive=root,id=vroot,serial=root",
		"-drive", fmt.Sprintf("file=%s,format=raw,if=none,id=data,cache=%s,throttling.iops-total=%d,throttling.bps-total=%d",
			c.dataDisk, c.dataCache, c.dataIOPS, c.dataBPS),
		"-device", "virtio-blk-pci,drive=data,id=" + dataDiskID + ",serial=data",
		// Only loopback: no guest traffic leaves, ssh reachable on 127.0.0.1.
		"-netdev", fmt.Sprintf("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:%d-:22", c.port),
		"-device", "virtio-net-pci,netdev=net0",
		"-qmp", "unix:" + c.qmpSock + ",server=on,wait=off",
		"-pidfile", c.pidf,
	}
	if c.accel == "kvm" {
		return append(args, "-accel", "kvm", "-cpu", "host")
	}
	return append(args, "-accel", "tcg,thread=multi")
}

func (g *Guest) qmpPath() string { return filepath.Join(g.dir, "qmp.sock") }

func (g *Guest) startQEMU() error {
	args := qemuArgs(qemuConfig{
		accel: g.accel, cpus: g.opts.CPUs, memMiB: g.opts.MemoryMiB, port: g.port,
		kernel: g.img.kernel, initrd: g.img.initrd,
		rootOverlay: filepath.Join(g.dir, "root.qcow2"), dataDisk: filepath.Join(g.dir, "data.raw"),
		dataIOPS: g.opts.DataDiskIOPS, dataBPS: g.opts.DataDiskBPS, dataCache: g.opts.DataDiskCache,
		console: g.consolePath(), qmpSock: g.qmpPath(), pidf: filepath.Join(g.dir, "qemu.pid"),
	})
	logf, err := os.Create(filepath.Join(g.dir, "qemu.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	p, err := startProcess(cmd)
	logf.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("starting qemu: %w", err)
	}
	g.qemu = p
	return nil
}

func (g *Guest) exited() bool {
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
	if g.qemu == nil {
		return "not started"
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

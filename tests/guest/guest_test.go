package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAccelFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cpuinfo  string
		kvmOpens bool
		want     string
	}{
		{"intel with kvm", "flags\t\t: fpu vme vmx sse\n", true, "kvm"},
		{"amd with kvm", "flags\t\t: fpu svm sse\n", true, "kvm"},
		{"pvm device without vmx/svm", "flags\t\t: fpu vme sse hypervisor\n", true, "tcg"},
		{"vmx but /dev/kvm closed", "flags\t\t: fpu vmx\n", false, "tcg"},
		{"vmx only in another field", "model name\t: vmx-like cpu\nflags\t\t: fpu\n", true, "tcg"},
	} {
		if got := accelFor([]byte(tc.cpuinfo), tc.kvmOpens); got != tc.want {
			t.Errorf("%s: accelFor = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestQemuArgs(t *testing.T) {
	c := qemuConfig{
		accel: "tcg", cpus: 2, memMiB: 3584, port: 40022,
		kernel: "/c/vmlinuz", initrd: "/c/initrd.img", rootOverlay: "/g/root.qcow2", dataDisk: "/g/data.raw",
		dataIOPS: 300, dataBPS: 50_000_000, dataCache: "writeback",
		rootIOPS: 500, rootBPS: 20_000_000, rootCache: "unsafe",
		console: "/g/console.log", qmpSock: "/g/qmp.sock", pidf: "/g/qemu.pid",
	}
	args := qemuArgs(c)
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-accel tcg,thread=multi",
		"-smp 2", "-m 3584",
		"-kernel /c/vmlinuz", "-initrd /c/initrd.img",
		"throttling.iops-total=300,throttling.bps-total=50000000",
		"id=root,cache=unsafe,discard=unmap,throttling.iops-total=500,throttling.bps-total=20000000",
		"id=" + rootDiskID + ",serial=root",
		"restrict=on,hostfwd=tcp:127.0.0.1:40022-:22",
		"file=/g/root.qcow2,format=qcow2",
		"-qmp unix:/g/qmp.sock,server=on,wait=off",
		"id=" + dataDiskID,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("qemu args lack %q:\n%s", want, joined)
		}
	}
	i := slices.Index(args, "-append")
	if i < 0 || !strings.Contains(args[i+1], "systemd.unified_cgroup_hierarchy=1") {
		t.Errorf("kernel command line lacks cgroup v2: %v", args)
	}
	if slices.Contains(args, "host") {
		t.Errorf("TCG must not use -cpu host: %s", joined)
	}
	if strings.Contains(joined, "vboot") || strings.Contains(joined, "-action") {
		t.Errorf("plain guest has an ostree /boot disk or reboot action: %s", joined)
	}
	c.accel = "kvm"
	if j := strings.Join(qemuArgs(c), " "); !strings.Contains(j, "-accel kvm -cpu host") {
		t.Errorf("kvm args: %s", j)
	}

	// The ostree guest: the entry's command line, /boot as vdc (after the
	// data disk), and a reboot ends qemu so the launcher boots the new
	// default entry.
	c.bootDisk, c.cmdline, c.exitOnReboot = "/g/boot.raw", "root=/dev/vda ostree=/ostree/boot.1/debian/abc/0", true
	args = qemuArgs(c)
	joined = strings.Join(args, " ")
	if i := slices.Index(args, "-append"); args[i+1] != c.cmdline {
		t.Errorf("-append %q, want the entry's options", args[i+1])
	}
	if b, d := strings.Index(joined, "id=vboot"), strings.Index(joined, "id="+dataDiskID); b < d {
		t.Errorf("/boot's disk before the data disk (would not be vdc): %s", joined)
	}
	if !strings.Contains(joined, "-action reboot=shutdown") {
		t.Errorf("no reboot action: %s", joined)
	}
}

func TestParseJournal(t *testing.T) {
	in := `{"MESSAGE":"update-agent starting","VERSION":"1.2","_BOOT_ID":"b1"}

{"MESSAGE":[104,105],"PRIORITY":"6"}
`
	got, err := ParseJournal([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0]["VERSION"] != "1.2" || got[1]["PRIORITY"] != "6" {
		t.Fatalf("ParseJournal = %v", got)
	}
	if _, err := ParseJournal([]byte("{\"A\":1}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: err = %v, want one naming line 2", err)
	}
}

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"plain", "with space", "it's", `$HOME "x" \n`, ""} {
		out, err := exec.Command("sh", "-c", "printf %s "+ShellQuote(s)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != s {
			t.Errorf("ShellQuote(%q) came back as %q", s, out)
		}
	}
}

// fakeQMP serves the QMP handshake and answers one command, emitting an
// event first as qemu may.
func fakeQMP(t *testing.T, answer func(req map[string]any) string) (string, <-chan map[string]any) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan map[string]any, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		conn.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var req map[string]any
			json.Unmarshal(line, &req)
			if req["execute"] == "qmp_capabilities" {
				conn.Write([]byte(`{"return": {}}` + "\n"))
				continue
			}
			got <- req
			conn.Write([]byte(`{"event": "RESUME", "data": {}}` + "\n" + answer(req) + "\n"))
		}
	}()
	return sock, got
}

func TestQMPCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sock, got := fakeQMP(t, func(map[string]any) string {
		return `{"return": [{"qdev": "/machine/peripheral/vdata/virtio-backend"}]}`
	})
	ret, err := qmpCall(ctx, sock, "block_set_io_throttle", map[string]any{"id": dataDiskID, "iops": 100})
	if err != nil {
		t.Fatal(err)
	}
	req := <-got
	args, _ := req["arguments"].(map[string]any)
	if req["execute"] != "block_set_io_throttle" || args["iops"] != float64(100) || args["id"] != dataDiskID {
		t.Errorf("request = %v", req)
	}
	if !strings.Contains(string(ret), "vdata") {
		t.Errorf("return = %s", ret)
	}

	sock, _ = fakeQMP(t, func(map[string]any) string {
		return `{"error": {"class": "GenericError", "desc": "Device 'nope' not found"}}`
	})
	if _, err := qmpCall(ctx, sock, "block_set_io_throttle", nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("error reply: err = %v", err)
	}
}

func TestContainsPathElem(t *testing.T) {
	if !containsPathElem("/machine/peripheral/vdata/virtio-backend", "vdata") {
		t.Error("vdata not found in its QOM path")
	}
	if containsPathElem("/machine/peripheral/vdata2/virtio-backend", "vdata") {
		t.Error("vdata2 matched vdata")
	}
}

// TestChildDiesWithTestProcess checks the promise that no qemu outlives a
// test binary killed outright: a helper copy of this test binary starts a
// child through startProcess and is SIGKILLed; the child must die too.
func TestChildDiesWithTestProcess(t *testing.T) {
	if os.Getenv("UA_GUEST_HELPER") == "1" {
		p, err := startProcess(exec.Command("sleep", "300"))
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		runtime.GC() // churn the scheduler a little; the child must survive this
		fmt.Println(p.cmd.Process.Pid)
		select {}
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithTestProcess$")
	helper.Env = append(os.Environ(), "UA_GUEST_HELPER=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("child %d not running before the kill: %v", pid, err)
	}
	helper.Process.Kill()
	helper.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The child is reparented to init (or a subreaper), which reaps it.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d still alive 10 s after its parent was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The first lines of what the kernel prints when stuck scroll out of a
// 60-line tail under a register dump; KernelWarnings finds them.
func TestKernelWarnings(t *testing.T) {
	console := strings.Join([]string{
		"[   73.4] ua-guest systemd-logind[351]: System is rebooting.",
		"[  300.1] INFO: task jbd2/vda-8:123 blocked for more than 120 seconds.",
		"[  300.2]       Not tainted 6.1.0-50-amd64 #1 Debian 6.1.176-1",
		"[  884.4] rcu: INFO: rcu_preempt self-detected stall on CPU",
		"[  884.4] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [systemd:1]",
		"[  884.4] RIP: 0033:0x7f5c98179190",
		"[  900.0] systemd-shutdown[1]: Sending SIGKILL to remaining processes...",
		"[  901.0] reboot: Restarting system",
		"[  902.0] random: crng init done",
	}, "\n")
	got := KernelWarnings([]byte(console), 20)
	want := []string{"2: ", "4: ", "5: ", "7: ", "8: "}
	if len(got) != len(want) {
		t.Fatalf("KernelWarnings = %q, want lines %v", got, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("warning %d = %q, want line %s", i, got[i], w)
		}
	}
	if got := KernelWarnings([]byte(console), 2); len(got) != 2 {
		t.Errorf("max 2: got %d lines", len(got))
	}
}

package etcdmember

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeProc makes a /proc entry: pid's name, cgroup text and, for
// ProcessListeners, a listening socket of its own.
func fakeProc(t *testing.T, proc, pid, comm, cgroup string) {
	t.Helper()
	dir := filepath.Join(proc, pid)
	for _, d := range []string{"fd", "net"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ino := "9" + pid
	tcp := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0B0200C0:094C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9100 1 0 100 0 0 10 0\n" +
		"   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9200 1 0 100 0 0 10 0\n"
	for name, body := range map[string]string{"comm": comm + "\n", "cgroup": cgroup, "net/tcp": tcp, "net/tcp6": "  sl\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("socket:["+ino+"]", filepath.Join(dir, "fd", "3")); err != nil {
		t.Fatal(err)
	}
}

const podCgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/crio-abc.scope"

func TestProcessCgroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		procs   [][3]string // pid, comm, cgroup text
		want    string
		wantErr string
	}{
		{name: "the static pod's member", procs: [][3]string{
			{"100", "etcd", "0::" + podCgroup + "\n"},
			{"200", "kubelet", "0::/system.slice/kubelet.service\n"},
			{"300", "etcdctl", "0::/user.slice\n"}},
			want: podCgroup},
		{name: "its threads' group and a second process in the same cgroup", procs: [][3]string{
			{"100", "etcd", "0::" + podCgroup + "\n"}, {"101", "etcd", "0::" + podCgroup + "\n"}},
			want: podCgroup},
		{name: "none runs", procs: [][3]string{{"200", "kubelet", "0::/system.slice/kubelet.service\n"}},
			wantErr: `no process named "etcd" runs`},
		{name: "cgroup v1 only", procs: [][3]string{{"100", "etcd", "4:memory:/kubepods\n1:name=systemd:/kubepods\n"}},
			wantErr: `no process named "etcd" runs (in a cgroup v2 hierarchy)`},
		{name: "two members", procs: [][3]string{
			{"100", "etcd", "0::" + podCgroup + "\n"}, {"400", "etcd", "0::/system.slice/etcd-test.service\n"}},
			wantErr: `processes named "etcd" run in 2 cgroups (/kubepods.slice/`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := t.TempDir()
			for _, p := range tc.procs {
				fakeProc(t, proc, p[0], p[1], p[2])
			}
			os.MkdirAll(filepath.Join(proc, "self"), 0o755) // not a process
			got, err := ProcessCgroup(proc, "etcd")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ProcessCgroup = %q, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ProcessCgroup = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestProcessListeners: the named process's listening sockets, not
// another process's.
func TestProcessListeners(t *testing.T) {
	proc := t.TempDir()
	fakeProc(t, proc, "100", "etcd", "0::"+podCgroup+"\n")    // socket inode 9100
	fakeProc(t, proc, "200", "other", "0::/system.slice/x\n") // socket inode 9200
	got, err := ProcessListeners(proc, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.11:2380")}; !slices.Equal(got, want) {
		t.Errorf("ProcessListeners = %v, want %v", got, want)
	}
}

// TestThisProcessByName finds this test binary by its name in the real
// /proc: the kernel's comm format and the cgroup v2 line.
func TestThisProcessByName(t *testing.T) {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip("no /proc")
	}
	comm := strings.TrimSpace(string(b))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := ProcessListeners("/proc", comm)
	if want := netip.MustParseAddrPort(l.Addr().String()); err != nil || !slices.Contains(got, want) {
		t.Errorf("ProcessListeners(%q) = %v, %v; want %v among them", comm, got, err, want)
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	want, ok := unifiedCgroup(string(self))
	if cg, err := ProcessCgroup("/proc", comm); !ok || err != nil || cg != want {
		t.Errorf("ProcessCgroup(%q) = %q, %v; want %q (%v)", comm, cg, err, want, ok)
	}
}

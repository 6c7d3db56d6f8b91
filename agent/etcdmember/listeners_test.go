package etcdmember

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:0950":                         "127.0.0.1:2384",
		"0B0200C0:094C":                         "192.0.2.11:2380",
		"00000000:094B":                         "0.0.0.0:2379",
		"00000000000000000000000001000000:094B": "[::1]:2379",
		"0000000000000000FFFF00000B0200C0:094C": "192.0.2.11:2380", // v4-mapped
		"B80D0120000000000000000001000000:094C": "[2001:db8::1]:2380",
	} {
		got, ok := parseProcAddr(in)
		if !ok || got.String() != want {
			t.Errorf("parseProcAddr(%s) = %v, %v; want %s", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "XYZ:0950", "0100:0950", "0100007F:FFFFF"} {
		if got, ok := parseProcAddr(bad); ok {
			t.Errorf("parseProcAddr(%q) = %v, accepted", bad, got)
		}
	}
}

func TestInUnit(t *testing.T) {
	cg := "0::/system.slice/etcd.service\n"
	if !inUnit(cg, "etcd.service") || inUnit(cg, "etcd") || inUnit(cg, "system.slice/etcd.service") {
		t.Error("cgroup v2 path")
	}
	if !inUnit("0::/system.slice/etcd.service/payload\n", "etcd.service") {
		t.Error("a sub-cgroup of the unit")
	}
	if !inUnit("12:pids:/system.slice/etcd.service\n1:name=systemd:/x\n", "etcd.service") {
		t.Error("cgroup v1 lines")
	}
}

// TestUnitListeners reads a made-up /proc: only the unit's process's
// listening sockets count, not its connections nor another unit's sockets.
func TestUnitListeners(t *testing.T) {
	proc := t.TempDir()
	mk := func(pid, cgroup string, inodes ...string) {
		dir := filepath.Join(proc, pid)
		os.MkdirAll(filepath.Join(dir, "fd"), 0o755)
		os.MkdirAll(filepath.Join(dir, "net"), 0o755)
		os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644)
		for i, ino := range inodes {
			os.Symlink("socket:["+ino+"]", filepath.Join(dir, "fd", strconv.Itoa(i+3)))
		}
		os.Symlink("/dev/null", filepath.Join(dir, "fd", "0"))
		tcp := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
			"   0: 0B0200C0:094C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0 100 0 0 10 0\n" +
			"   1: 00000000:094B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1002 1 0 100 0 0 10 0\n" +
			"   2: 0B0200C0:094C 0C0200C0:D431 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0 100 0 0 10 0\n" +
			"   3: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2001 1 0 100 0 0 10 0\n"
		os.WriteFile(filepath.Join(dir, "net", "tcp"), []byte(tcp), 0o644)
		os.WriteFile(filepath.Join(dir, "net", "tcp6"), []byte("  sl  local_address\n"), 0o644)
	}
	mk("100", "0::/system.slice/etcd.service\n", "1001", "1002", "1003")
	mk("200", "0::/system.slice/other.service\n", "2001")
	os.MkdirAll(filepath.Join(proc, "self"), 0o755)
	got, err := UnitListeners(proc, "etcd.service")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.11:2380"), netip.MustParseAddrPort("0.0.0.0:2379")}
	if !slices.Equal(got, want) {
		t.Errorf("UnitListeners = %v, want %v", got, want)
	}
}

// TestListenersOfThisProcess reads the real /proc: a socket this test
// listens on is found, in the kernel's own format.
func TestListenersOfThisProcess(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := netip.MustParseAddrPort(l.Addr().String())
	got := listenersOf("/proc", []string{strconv.Itoa(os.Getpid())})
	if !slices.Contains(got, want) {
		t.Errorf("listeners of this process %v lack %v", got, want)
	}
}

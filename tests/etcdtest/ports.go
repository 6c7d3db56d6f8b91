package etcdtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// freePorts returns n TCP ports reserved for this test. They are drawn at
// random outside the kernel's ephemeral range (ip_local_port_range): a port
// in it can be taken at any moment as the source port of some outgoing
// connection, also while a member is down between a stop and a restart (CI
// once failed with "starting etcd member 0: bind: address already in use"
// in a single test process). A port that is merely free a moment ago is not
// enough either: test packages run in parallel processes, and two of them
// once drew the same free port between one's probe and its bind. So each
// port is also claimed with an exclusive flock on a file named after it,
// held until the test ends; every process using etcdtest skips ports
// another holds.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "etcdtest-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("reserving ports: %v", err)
	}
	lo, hi := portBand(readEphemeral())
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("finding %d free ports: none left in [%d, %d)", n, lo, hi)
		}
		port := lo + rand.IntN(hi-lo)
		if slices.Contains(ports, port) {
			continue
		}
		claim, err := claimPort(dir, port)
		if err != nil {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			claim.Close()
			continue
		}
		l.Close()
		t.Cleanup(func() { claim.Close() })
		ports = append(ports, port)
	}
	return ports
}

// portBand is where test ports are drawn from, [lo, hi): the larger of the
// parts of [portLow, 65536) below and above the ephemeral range [elo, ehi],
// or [portLow, portHigh) when neither has room (the range covers nearly
// everything, or it could not be read).
func portBand(elo, ehi int) (lo, hi int) {
	const minPorts = 1000
	below := [2]int{portLow, min(elo, 65536)}
	above := [2]int{max(ehi+1, portLow), 65536}
	best := below
	if above[1]-above[0] > best[1]-best[0] {
		best = above
	}
	if elo <= 0 || best[1]-best[0] < minPorts {
		return portLow, portHigh
	}
	return best[0], best[1]
}

// readEphemeral reads the kernel's ephemeral port range; (0, 0) if unknown.
func readEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo > hi {
		return 0, 0
	}
	return lo, hi
}

// claimPort takes the port's lock file without waiting; closing the file
// gives it back (also when the process dies).
func claimPort(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// addrInUse reports a bind that lost its port; etcd does not always wrap
// the syscall error, so the message counts too.
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

const portLow, portHigh = 20000, 32000

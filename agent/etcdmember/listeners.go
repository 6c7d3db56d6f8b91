package etcdmember

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// UnitListeners lists the TCP addresses that processes of the systemd unit
// listen on, read from procRoot ("/proc"): the processes whose cgroup path
// has the unit as a component, their socket inodes, and those sockets in
// LISTEN state in their network namespace's tcp and tcp6 tables.
func UnitListeners(procRoot, unit string) ([]netip.AddrPort, error) {
	pids, err := pidsWhere(procRoot, "cgroup", func(s string) bool { return inUnit(s, unit) })
	if err != nil {
		return nil, err
	}
	return listenersOf(procRoot, pids), nil
}

// pidsWhere lists the processes under procRoot whose /proc/PID/file text
// satisfies match.
func pidsWhere(procRoot, file string, match func(string) bool) ([]string, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var pids []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		// A process may exit while we look: skip what cannot be read.
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), file))
		if err == nil && match(string(b)) {
			pids = append(pids, e.Name())
		}
	}
	return pids, nil
}

// inUnit says whether a /proc/PID/cgroup text puts the process in unit.
func inUnit(cgroup, unit string) bool {
	for _, line := range strings.Split(cgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[2], "/") {
			if c == unit {
				return true
			}
		}
	}
	return false
}

// listenersOf returns the listening TCP sockets the processes pids hold.
func listenersOf(procRoot string, pids []string) []netip.AddrPort {
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(filepath.Join(procRoot, pid, "fd"))
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(procRoot, pid, "fd", fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	seen := map[netip.AddrPort]bool{}
	var out []netip.AddrPort
	for _, pid := range pids {
		for _, table := range []string{"tcp", "tcp6"} {
			for _, ap := range listening(filepath.Join(procRoot, pid, "net", table), inodes) {
				if !seen[ap] {
					seen[ap] = true
					out = append(out, ap)
				}
			}
		}
	}
	return out
}

// listening parses a /proc/net/tcp{,6} table for LISTEN sockets (state
// 0A) among inodes; an unreadable table has none.
func listening(path string, inodes map[string]bool) []netip.AddrPort {
	out, _ := scanListening(path, inodes)
	return out
}

// scanListening is listening with the error; nil inodes: every socket.
func scanListening(path string, inodes map[string]bool) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != "0A" || (inodes != nil && !inodes[fs[9]]) {
			continue
		}
		if ap, ok := parseProcAddr(fs[1]); ok {
			out = append(out, ap)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// parseProcAddr parses "0100007F:0950": the address as the kernel's 32-bit
// words in host (little-endian) order, the port in big-endian hex.
func parseProcAddr(s string) (netip.AddrPort, bool) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}

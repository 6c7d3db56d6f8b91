package etcdmember

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A member the kubelet runs (a static pod: kubeadm, OpenShift) has no
// systemd service of its own; its cgroup (kubepods.slice/.../crio-ID.scope)
// changes with every container restart. etcd.local_process names the
// member's process instead, and these find its cgroup and listeners from
// /proc each time they are needed.

// ProcessPIDs lists the processes under procRoot ("/proc") whose name
// (/proc/PID/comm, the kernel's 15-byte copy) is comm.
func ProcessPIDs(procRoot, comm string) ([]string, error) {
	return pidsWhere(procRoot, "comm", func(s string) bool { return strings.TrimSuffix(s, "\n") == comm })
}

// ProcessCgroup is the cgroup v2 path (relative to the hierarchy's root,
// "/kubepods.slice/...") of the processes named comm: one cgroup, or an
// error saying that none runs or that they are in several.
func ProcessCgroup(procRoot, comm string) (string, error) {
	pids, err := ProcessPIDs(procRoot, comm)
	if err != nil {
		return "", err
	}
	var cgs []string
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join(procRoot, pid, "cgroup"))
		if err != nil {
			continue
		}
		if cg, ok := unifiedCgroup(string(b)); ok && !slices.Contains(cgs, cg) {
			cgs = append(cgs, cg)
		}
	}
	switch len(cgs) {
	case 0:
		return "", fmt.Errorf("no process named %q runs (in a cgroup v2 hierarchy)", comm)
	case 1:
		return cgs[0], nil
	}
	slices.Sort(cgs)
	return "", fmt.Errorf("processes named %q run in %d cgroups (%s): cannot tell the member's", comm, len(cgs), strings.Join(cgs, ", "))
}

// unifiedCgroup is the cgroup v2 line ("0::/path") of a /proc/PID/cgroup
// text.
func unifiedCgroup(text string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && p != "" {
			return p, true
		}
	}
	return "", false
}

// ProcessListeners lists the TCP addresses the processes named comm listen
// on (as UnitListeners does for a unit's).
func ProcessListeners(procRoot, comm string) ([]netip.AddrPort, error) {
	pids, err := ProcessPIDs(procRoot, comm)
	if err != nil {
		return nil, err
	}
	return listenersOf(procRoot, pids), nil
}

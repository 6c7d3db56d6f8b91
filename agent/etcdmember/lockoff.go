package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// With lock.enabled = false the agent reboots with no slot, no quorum check
// and no leader move: only a worker may run so. The configuration names the
// member's unit or process when it knows (config refuses those); with
// etcd.member = "auto" and neither, the host itself must be asked, and the
// agent may have no etcd endpoints at all. What a host shows of a member
// without the cluster's word: a process named etcd, and a listener on
// etcd's ports (a static pod's member shares the host's network).

// EtcdProcess is the process name (/proc/PID/comm) of an etcd member.
const EtcdProcess = "etcd"

// EtcdPorts are etcd's client and peer ports (IANA).
var EtcdPorts = []uint16{2379, 2380}

// Signs is what this host shows of an etcd member running on it.
type Signs struct {
	// Processes are the PIDs of processes named EtcdProcess; ProcErr says
	// that the processes could not be listed.
	Processes []string
	ProcErr   error
	// Listeners are TCP sockets listening on EtcdPorts in this network
	// namespace; ListenErr says that its socket tables could not be read.
	Listeners []netip.AddrPort
	ListenErr error
	// Asked: etcd.endpoints are set and the cluster was asked. ListErr:
	// its members could not be listed; else they were matched against this
	// host (LocalMatch): Match, or MatchErr.
	Asked    bool
	ListErr  error
	Match    Match
	MatchErr error
	// LocalOnly: every endpoint is a loopback one (the default). Then a
	// cluster that does not answer, on ports nothing listens on, says only
	// that no member serves here; one that does not answer on a port
	// something listens on (EndpointListeners: a member refusing our
	// credentials?), or a remote one, leaves this host unknown.
	LocalOnly         bool
	EndpointListeners []netip.AddrPort
}

// LockOff is the verdict on running without the lock.
type LockOff int

const (
	// LockOffWorker: nothing on this host looks like a member.
	LockOffWorker LockOff = iota
	// LockOffMember: this host runs an etcd member.
	LockOffMember
	// LockOffUnsure: some evidence could not be read; not a worker.
	LockOffUnsure
)

// JudgeLockOff decides whether a host with lock.enabled = false runs an
// etcd member; why says what decided. Any sign of a member decides; short of
// one, evidence that could not be read leaves it unsure, which must refuse
// like a member (a worker skips every check).
func JudgeLockOff(s Signs) (LockOff, string) {
	var member []string
	if len(s.Processes) > 0 {
		member = append(member, fmt.Sprintf("process %q runs (pid %s)", EtcdProcess, strings.Join(s.Processes, ", ")))
	}
	if len(s.Listeners) > 0 {
		member = append(member, "etcd's ports are listened on ("+joinAddrPorts(s.Listeners)+")")
	}
	if s.Asked && s.ListErr == nil && s.MatchErr == nil && s.Match.Found {
		member = append(member, "the cluster lists it: "+s.Match.How)
	}
	if len(member) > 0 {
		return LockOffMember, "this host runs an etcd member: " + strings.Join(member, "; ")
	}
	var unsure []string
	for _, err := range []error{s.ProcErr, s.ListenErr} {
		if err != nil {
			unsure = append(unsure, err.Error())
		}
	}
	switch {
	case !s.Asked:
	case s.ListErr != nil && !s.LocalOnly:
		unsure = append(unsure, s.ListErr.Error())
	case s.ListErr != nil && len(s.EndpointListeners) > 0:
		unsure = append(unsure, fmt.Sprintf("the local endpoints' ports are listened on (%s) but %v", joinAddrPorts(s.EndpointListeners), s.ListErr))
	case s.ListErr == nil && s.MatchErr != nil:
		unsure = append(unsure, s.MatchErr.Error())
	}
	if len(unsure) > 0 {
		return LockOffUnsure, "cannot tell whether this host runs an etcd member: " + strings.Join(unsure, "; ")
	}
	why := fmt.Sprintf("no process %q and no listener on ports %v", EtcdProcess, EtcdPorts)
	switch {
	case s.Asked && s.ListErr != nil:
		why += "; no member serves the local endpoints (" + s.ListErr.Error() + ")"
	case s.Asked:
		why += "; " + s.Match.How
	default:
		why += "; etcd.endpoints not set, the cluster was not asked"
	}
	return LockOffWorker, why
}

func joinAddrPorts(ls []netip.AddrPort) string {
	var out []string
	for _, l := range ls {
		out = append(out, l.String())
	}
	return strings.Join(out, ", ")
}

// LookSigns gathers Signs from procRoot ("/proc") and, when c is not nil,
// the cluster (reached through endpoints).
func LookSigns(ctx context.Context, procRoot string, c *Cluster, endpoints []string) Signs {
	var s Signs
	s.Processes, s.ProcErr = ProcessPIDs(procRoot, EtcdProcess)
	if s.ProcErr != nil {
		s.ProcErr = fmt.Errorf("looking for an etcd process: %w", s.ProcErr)
	}
	s.Listeners, s.ListenErr = PortListeners(procRoot, EtcdPorts...)
	if c != nil {
		s.Asked, s.LocalOnly = true, len(endpoints) > 0 && !slices.ContainsFunc(endpoints, func(ep string) bool { return !isLoopback(ep) })
		if _, s.ListErr = c.Members(ctx); s.ListErr == nil {
			s.Match, s.MatchErr = c.LocalMatch(ctx)
		} else if s.LocalOnly && s.ListenErr == nil {
			s.EndpointListeners, _ = PortListeners(procRoot, endpointPorts(endpoints)...)
		}
	}
	return s
}

// endpointPorts are the ports of client URLs (etcd's client port when one
// names none).
func endpointPorts(endpoints []string) []uint16 {
	var out []uint16
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			continue
		}
		p, err := strconv.ParseUint(u.Port(), 10, 16)
		if err != nil {
			p = uint64(EtcdPorts[0])
		}
		out = append(out, uint16(p))
	}
	return out
}

// PortListeners lists the TCP sockets listening on ports in the network
// namespace of procRoot's reader (procRoot/net/tcp and tcp6), whichever
// process holds them. A host without IPv6 has no tcp6 table.
func PortListeners(procRoot string, ports ...uint16) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, table := range []string{"tcp", "tcp6"} {
		ls, err := scanListening(filepath.Join(procRoot, "net", table), nil)
		if table == "tcp6" && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the listening sockets: %w", err)
		}
		for _, l := range ls {
			if slices.Contains(ports, l.Port()) && !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out, nil
}

package etcdmember

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// HostAddr is one of this host's own interface addresses.
type HostAddr struct {
	IP    netip.Addr
	Iface string
}

func (a HostAddr) String() string { return fmt.Sprintf("%s on %s", a.IP, a.Iface) }

// Host is what this host is, as far as finding its etcd member goes.
type Host struct {
	Addrs    []HostAddr
	Hostname string
	// LocalUnit is etcd.local_unit: set, it says this host runs a member.
	LocalUnit string
	// LocalProcess is etcd.local_process: the same, for a member no unit
	// runs.
	LocalProcess string
	// Served are local client endpoints and the member each said serves it.
	Served []Served
	// ServeErrs are local client endpoints that did not answer.
	ServeErrs []error
	// Listeners are the TCP addresses the local member's processes
	// (LocalUnit's or LocalProcess's) listen on.
	Listeners []netip.AddrPort
	// Resolved are the host names of the members' URLs (URLHostNames) and
	// what each resolved to.
	Resolved []Resolution
}

// Served is a local endpoint and the member ID its Status call named.
type Served struct {
	Endpoint string
	MemberID uint64
}

// Match is the local member, or why this host runs none; How says which
// evidence decided, for logs and doctor.
type Match struct {
	Member Member
	Found  bool
	How    string
}

// evidence is one reason to think member m runs on this host.
type evidence struct {
	m    Member
	why  string
	rank rank
}

// rank orders evidence. Strong evidence decides, and two members with it
// are an error. Weaker evidence decides only when a single member has it:
// loopback URLs hold on every host (so they decide in a one-member
// cluster), and the local unit listening on a loopback URL's port picks one
// of several members on one host, but says nothing when every member
// advertises the same loopback URL.
type rank int

const (
	strong rank = iota
	unitOnLoopback
	loopback
)

// MatchLocal finds this host's member among members, by the endpoints the
// member answered on, the host's own addresses and host name in the
// members' peer and client URLs (or behind the names there, as resolved),
// and the local unit's listeners. A host that looks like a member host
// (local_unit set, or an own address in a peer URL) and matches no started
// member is an error, never a worker: a worker skips every quorum check. So
// is a member URL's host name that did not resolve, unless strong evidence
// found the member.
func MatchLocal(members []Member, h Host) (Match, error) {
	var ev []evidence
	for _, s := range h.Served {
		for _, m := range members {
			if m.ID == s.MemberID {
				ev = append(ev, evidence{m: m, why: "serves local endpoint " + s.Endpoint})
			}
		}
	}
	for _, m := range members {
		for _, u := range m.PeerURLs {
			if why, r, ok := urlMatches(u, h); ok {
				ev = append(ev, evidence{m: m, why: "peer URL " + why, rank: r})
			}
			if why, r, ok := listenerMatches(u, h); ok {
				ev = append(ev, evidence{m: m, why: "peer URL " + why, rank: r})
			}
		}
		for _, u := range m.ClientURLs {
			if why, r, ok := urlMatches(u, h); ok {
				ev = append(ev, evidence{m: m, why: "client URL " + why, rank: r})
			}
			if why, r, ok := listenerMatches(u, h); ok {
				ev = append(ev, evidence{m: m, why: "client URL " + why, rank: r})
			}
		}
	}
	if s := byMember(ev, strong); len(s) > 1 {
		return Match{}, fmt.Errorf("this host matches several etcd members: %s; set etcd.member to the local one", describe(s))
	}
	seen := describeHost(h) + describeResolved(h)
	if g := byMember(ev, strong); len(g) == 1 {
		return found(g[0])
	}
	if err := unresolved(members, h, seen); err != nil {
		return Match{}, err
	}
	for r := strong; r <= loopback; r++ {
		switch g := byMember(ev, r); {
		case len(g) == 1:
			return found(g[0])
		case len(g) > 1:
			seen += "; " + describe(g) + " are on loopback everywhere"
		}
	}
	switch {
	case len(h.ServeErrs) > 0:
		return Match{}, fmt.Errorf("no etcd member matches this host (%s), and its local endpoints did not answer: %w", seen, joinErrs(h.ServeErrs))
	case h.localKey() != "":
		return Match{}, fmt.Errorf("%s = %s says this host runs an etcd member, but no member's peer or client URLs match this host (%s)", h.localKey(), h.localName(), seen)
	}
	return Match{How: fmt.Sprintf("a worker: no etcd member's peer or client URLs match this host (%s), and neither etcd.local_unit nor etcd.local_process is set", seen)}, nil
}

// found turns a member's evidence into the match; a member with no name
// yet (added, not started) is this host's, but there is nothing to
// coordinate with: an error, not a worker.
func found(es []evidence) (Match, error) {
	m := es[0].m
	if m.Name == "" {
		return Match{}, fmt.Errorf("etcd member %x matches this host (%s) but has not started yet (no name)", m.ID, es[0].why)
	}
	return Match{Member: m, Found: true, How: fmt.Sprintf("member %s: %s", m.Name, es[0].why)}, nil
}

// byMember groups the evidence of rank r by member, in member order.
func byMember(ev []evidence, r rank) [][]evidence {
	var out [][]evidence
	idx := map[uint64]int{}
	for _, e := range ev {
		if e.rank != r {
			continue
		}
		i, ok := idx[e.m.ID]
		if !ok {
			i = len(out)
			idx[e.m.ID] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], e)
	}
	return out
}

func describe(groups [][]evidence) string {
	var parts []string
	for _, es := range groups {
		name := es[0].m.Name
		if name == "" {
			name = fmt.Sprintf("%x", es[0].m.ID)
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", name, es[0].why))
	}
	return strings.Join(parts, ", ")
}

func describeHost(h Host) string {
	var addrs []string
	for _, a := range h.Addrs {
		if !a.IP.IsLoopback() && !a.IP.IsLinkLocalUnicast() {
			addrs = append(addrs, a.String())
		}
	}
	const most = 6 // a node with many CNI interfaces: keep the line readable
	if len(addrs) > most {
		addrs = append(addrs[:most], fmt.Sprintf("%d more", len(addrs)-most))
	}
	s := "addresses " + strings.Join(addrs, ", ")
	if len(addrs) == 0 {
		s = "no address but loopback"
	}
	if h.Hostname != "" {
		s += ", host name " + h.Hostname
	}
	return s
}

// urlMatches says whether raw names this host: an own address, or the
// host name (full or short). Loopback and "localhost" rank lowest.
func urlMatches(raw string, h Host) (why string, r rank, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", 0, false
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap().WithZone("")
		if ip.IsUnspecified() {
			return "", 0, false
		}
		for _, a := range h.Addrs {
			if a.IP.Unmap().WithZone("") == ip {
				r = strong
				if ip.IsLoopback() {
					r = loopback
				}
				return fmt.Sprintf("%s matches %s", raw, a), r, true
			}
		}
		return "", 0, false
	}
	if strings.EqualFold(host, "localhost") {
		return raw + " is localhost", loopback, true
	}
	if sameHost(host, h.Hostname) {
		return fmt.Sprintf("%s names host %s", raw, h.Hostname), strong, true
	}
	return resolvedMatches(raw, host, h)
}

// localKey is the configuration key saying this host runs a member, and
// localName its value ("" both where none says so).
func (h Host) localKey() string {
	switch {
	case h.LocalUnit != "":
		return "etcd.local_unit"
	case h.LocalProcess != "":
		return "etcd.local_process"
	}
	return ""
}

func (h Host) localName() string {
	if h.LocalUnit != "" {
		return h.LocalUnit
	}
	return h.LocalProcess
}

// listenerMatches says whether the local member listens on raw's address and
// port: exactly, or on the port of a wildcard address when raw's address is
// the host's own.
func listenerMatches(raw string, h Host) (string, rank, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", 0, false
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		return "", 0, false
	}
	ip := ap.Addr().Unmap().WithZone("")
	own := false
	for _, a := range h.Addrs {
		own = own || a.IP.Unmap().WithZone("") == ip
	}
	for _, l := range h.Listeners {
		if l.Port() == ap.Port() && (l.Addr().Unmap() == ip || (l.Addr().IsUnspecified() && own)) {
			r := strong
			if ip.IsLoopback() {
				r = unitOnLoopback
			}
			return fmt.Sprintf("%s: %s listens on %s", raw, h.localName(), l), r, true
		}
	}
	return "", 0, false
}

// sameHost compares host names, a short name equal to the other's first
// label ("cp1" and "cp1.example.com").
func sameHost(a, b string) bool {
	a, b = strings.TrimSuffix(strings.ToLower(a), "."), strings.TrimSuffix(strings.ToLower(b), ".")
	if a == "" || b == "" {
		return false
	}
	if a == b {
		return true
	}
	short := func(s string) string { return strings.SplitN(s, ".", 2)[0] }
	if !strings.Contains(a, ".") || !strings.Contains(b, ".") {
		return short(a) == short(b)
	}
	return false
}

func joinErrs(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	var s []string
	for _, e := range errs {
		s = append(s, e.Error())
	}
	return fmt.Errorf("%s", strings.Join(s, "; "))
}

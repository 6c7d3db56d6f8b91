package etcdmember

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// Resolution is what one host name in the members' peer and client URLs
// resolved to on this host (the adapter resolves, MatchLocal compares):
// members advertised by DNS names are found by the addresses behind them.
type Resolution struct {
	Name  string
	Addrs []netip.Addr
	Err   error // the name did not resolve
}

// URLHostNames are the host names (not address literals, not localhost) in
// the members' peer and client URLs, each once, lower case, in member order:
// what the adapter resolves.
func URLHostNames(members []Member) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range members {
		for _, raw := range append(append([]string(nil), m.PeerURLs...), m.ClientURLs...) {
			name, ok := urlHostName(raw)
			if ok && !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out
}

// urlHostName is raw's host when it is a name to resolve.
func urlHostName(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", false
	}
	name := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if _, err := netip.ParseAddr(name); err == nil || name == "localhost" || name == "" {
		return "", false
	}
	return name, true
}

// resolution is what name resolved to; ok is false when it was not looked
// up.
func (h Host) resolution(name string) (Resolution, bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, r := range h.Resolved {
		if r.Name == name {
			return r, true
		}
	}
	return Resolution{}, false
}

// resolvedMatches says whether host, a name, resolved to one of this
// host's own addresses.
func resolvedMatches(raw, host string, h Host) (why string, r rank, ok bool) {
	res, found := h.resolution(host)
	if !found || res.Err != nil {
		return "", 0, false
	}
	for _, ip := range res.Addrs {
		ip = ip.Unmap().WithZone("")
		if ip.IsUnspecified() {
			continue
		}
		for _, a := range h.Addrs {
			if a.IP.Unmap().WithZone("") == ip {
				r = strong
				if ip.IsLoopback() {
					r = loopback
				}
				return fmt.Sprintf("%s: %s resolves to %s, which matches %s", raw, res.Name, joinAddrs(res.Addrs), a), r, true
			}
		}
	}
	return "", 0, false
}

// unresolved is an error naming the members' URL host names that did not
// resolve (or were not looked up): this host may be behind one of them, so
// it cannot be taken for a worker.
func unresolved(members []Member, h Host, seen string) error {
	var bad []string
	for _, name := range URLHostNames(members) {
		switch res, ok := h.resolution(name); {
		case !ok:
			bad = append(bad, name+" (not looked up)")
		case res.Err != nil:
			bad = append(bad, res.Err.Error()) // the adapter's error names the name
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("cannot tell whether this host runs an etcd member: member URL host name(s) did not resolve: %s; "+
		"no member matches this host (%s)", strings.Join(bad, ", "), seen)
}

// describeResolved lists the names that resolved, for How and errors.
func describeResolved(h Host) string {
	var parts []string
	for _, r := range h.Resolved {
		if r.Err == nil {
			parts = append(parts, r.Name+" is "+joinAddrs(r.Addrs))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; resolved " + strings.Join(parts, ", ")
}

func joinAddrs(as []netip.Addr) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, " ")
}
